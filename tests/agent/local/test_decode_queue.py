"""The ASR server's shared decoder: finals first, fair between sessions, bounded."""

from __future__ import annotations

import asyncio
import time

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
