"""The ASR server's shared decoder: finals first, fair between sessions, bounded."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import numpy as np
import pytest

from agent.local.recognizer import DecodeQueue, DecoderBusy

pytestmark = pytest.mark.timeout(30)


class TimedRecognizer:
    """Takes 10 ms per second of audio and names the job it decoded (a model stand-in: the
    queue is under test, not Whisper)."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def transcribe(self, audio: np.ndarray) -> str:
        time.sleep(len(audio) / 16_000 * 0.01)
        label = f"job-{int(audio[0])}"
        self.order.append(label)
        return label


def job(label: int, seconds: float = 1.0) -> np.ndarray:
    audio = np.zeros(int(seconds * 16_000), np.float32)
    audio[0] = label
    return audio


async def test_a_busy_session_cannot_starve_a_newcomer() -> None:
    recognizer = TimedRecognizer()
    queue = DecodeQueue(recognizer)
    queue.start()
    try:
        hog, newcomer = object(), object()
        first = queue.submit(job(0), priority=DecodeQueue.FINAL, session=hog)
        await first  # the hog has used the decoder already
        backlog = [queue.submit(job(n), priority=DecodeQueue.FINAL, session=hog) for n in (1, 2, 3)]
        late = queue.submit(job(9), priority=DecodeQueue.FINAL, session=newcomer)
        await asyncio.gather(late, *backlog)
    finally:
        await queue.close()
    assert recognizer.order.index("job-9") <= 2  # not behind the hog's whole backlog


async def test_finals_go_before_partials() -> None:
    recognizer = TimedRecognizer()
    queue = DecodeQueue(recognizer)
    blocker = queue.submit(job(0, seconds=5), priority=DecodeQueue.FINAL, session="a")
    partial = queue.submit(job(1), priority=DecodeQueue.PARTIAL, session="b")
    final = queue.submit(job(2), priority=DecodeQueue.FINAL, session="c")
    queue.start()
    try:
        await asyncio.gather(blocker, partial, final)
    finally:
        await queue.close()
    assert recognizer.order == ["job-0", "job-2", "job-1"]


async def test_too_much_waiting_work_is_refused_not_queued() -> None:
    queue = DecodeQueue(TimedRecognizer(), max_waiting=3)
    waiting = [queue.submit(job(n), priority=DecodeQueue.FINAL, session=n) for n in range(3)]
    with pytest.raises(DecoderBusy):
        queue.submit(job(3), priority=DecodeQueue.FINAL, session=3)
    waiting[0].cancel()  # a cancelled job frees its place
    queue.submit(job(4), priority=DecodeQueue.FINAL, session=4).cancel()
    await queue.close()


class DoubtingRecognizer:
    """A two-pass stand-in: the first pass doubts every job whose label is odd and leaves it
    to the second; each pass waits until the test lets it finish (``release``)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.started = threading.Event()
        self.release = threading.Event()

    def first_pass(self, audio: np.ndarray) -> str | None:
        return self._pass(audio, "first", doubt=int(audio[0]) % 2 == 1)

    def second_pass(self, audio: np.ndarray) -> str:
        return self._pass(audio, "second", doubt=False) or ""

    def transcribe(self, audio: np.ndarray) -> str:
        raise AssertionError("the queue runs the passes one by one")

    def _pass(self, audio: np.ndarray, name: str, *, doubt: bool) -> str | None:
        self.started.set()
        assert self.release.wait(10), "the test never let the pass finish"
        self.order.append(f"job-{int(audio[0])} {name}")
        return None if doubt else f"job-{int(audio[0])}"


async def started(recognizer: DoubtingRecognizer) -> None:
    """Until a pass is on the worker."""
    assert await asyncio.to_thread(recognizer.started.wait, 10)


@asynccontextmanager
async def running(recognizer: DoubtingRecognizer) -> AsyncIterator[DecodeQueue]:
    queue = DecodeQueue(recognizer)
    queue.start()
    try:
        yield queue
    finally:
        await queue.close()


async def test_a_final_goes_between_the_two_passes_of_a_doubted_partial() -> None:
    recognizer = DoubtingRecognizer()
    async with running(recognizer) as queue:
        partial = queue.submit(job(1), priority=DecodeQueue.PARTIAL, session="a")
        await started(recognizer)
        final = queue.submit(job(2), priority=DecodeQueue.FINAL, session="b")
        recognizer.release.set()
        assert (await final)[0] == "job-2"
        assert (await partial)[0] == "job-1"
    assert recognizer.order == ["job-1 first", "job-2 first", "job-1 second"]


async def test_a_job_cancelled_between_its_passes_never_runs_the_second() -> None:
    recognizer = DoubtingRecognizer()
    async with running(recognizer) as queue:
        partial = queue.submit(job(1), priority=DecodeQueue.PARTIAL, session="a")
        await started(recognizer)
        assert queue.has_started(partial)
        partial.cancel()  # the final made it moot while its first pass ran
        recognizer.release.set()
        await queue.submit(job(2), priority=DecodeQueue.FINAL, session="a")
    assert recognizer.order == ["job-1 first", "job-2 first"]


async def test_a_promoted_partial_runs_its_second_pass_before_other_partials() -> None:
    """A partial that stands for its session's final (``done`` will reuse it) goes with the
    finals: before another session's partial, though its own session has used the decoder
    more."""
    recognizer = DoubtingRecognizer()
    async with running(recognizer) as queue:
        partial = queue.submit(job(1), priority=DecodeQueue.PARTIAL, session="a")
        await started(recognizer)
        other = queue.submit(job(2), priority=DecodeQueue.PARTIAL, session="b")
        assert not queue.has_started(other)
        queue.promote(partial)
        recognizer.release.set()
        await asyncio.gather(partial, other)
    assert recognizer.order == ["job-1 first", "job-1 second", "job-2 first"]
