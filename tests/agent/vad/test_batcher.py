"""The Silero batcher: windows of many calls scored together, each call's in order, and one
call's failure harming only that call."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADState

from agent.fastpath.shared_silero import SharedSileroVADAnalyzer
from agent.vad import SileroBatcher, SileroStream
from agent.vad.batcher import infer, silero_session
from tests.conftest import requires_espeak
from tests.fakes.speech import conversation

pytestmark = requires_espeak

HANG_GUARD_S = 60.0  # only stops a hung test; nothing here asserts speed


def sequential_scores(windows: list[bytes]) -> list[float]:
    """One stream's windows scored one by one, unbatched: the reference for batched runs."""
    stream = SileroStream()
    return [float(infer(silero_session(), 16000, [stream], [w])[0]) for w in windows]


async def test_full_batches_run_at_once_and_leftovers_on_the_timer() -> None:
    batcher = SileroBatcher(max_batch=3)
    pcm = conversation(16000, gaps=(0.1,))
    windows = [pcm[i * 1024 + 16000 : (i + 1) * 1024 + 16000] for i in range(7)]
    scores = await asyncio.gather(*(batcher.score(SileroStream(), w, 16000) for w in windows))
    assert [float(s) for s in scores] == [sequential_scores([w])[0] for w in windows]
    assert (batcher.stats.batches, batcher.stats.largest_batch) == (3, 3)


async def test_two_windows_of_one_stream_queued_together_are_scored_in_order() -> None:
    batcher = SileroBatcher()
    pcm = conversation(16000, gaps=(0.1,))
    windows = [pcm[i * 1024 + 16000 : (i + 1) * 1024 + 16000] for i in range(3)]
    stream = SileroStream()
    scores = await asyncio.gather(*(batcher.score(stream, w, 16000) for w in windows))
    assert [float(s) for s in scores] == sequential_scores(windows)
    assert batcher.stats.batches == 3


async def test_a_buffer_of_windows_is_scored_in_rounds_shared_with_other_calls() -> None:
    batcher = SileroBatcher()
    pcm = conversation(16000, gaps=(0.1,))
    windows = [pcm[i * 1024 + 16000 : (i + 1) * 1024 + 16000] for i in range(5)]
    seen: list[tuple[str, float]] = []
    three, two = await asyncio.gather(
        batcher.score_windows(
            SileroStream(), windows[:3], 16000, on_window=lambda w, c: seen.append(("a", c))
        ),
        batcher.score_windows(
            SileroStream(), windows[3:], 16000, on_window=lambda w, c: seen.append(("b", c))
        ),
    )
    assert [float(c) for c in three] == sequential_scores(windows[:3])
    assert [float(c) for c in two] == sequential_scores(windows[3:])
    # One inference per round: (a1, b1), (a2, b2), (a3); each window reported as it is scored.
    assert (batcher.stats.batches, batcher.stats.windows, batcher.stats.largest_batch) == (3, 5, 2)
    assert [name for name, _ in seen] == ["a", "b", "a", "b", "a"]


async def test_a_failing_window_callback_fails_only_its_own_call() -> None:
    batcher = SileroBatcher()
    pcm = conversation(16000, gaps=(0.1,))
    windows = [pcm[i * 1024 + 16000 : (i + 1) * 1024 + 16000] for i in range(2)]

    def explode(window: bytes, confidence: np.float32) -> None:
        raise RuntimeError("callback failed")

    bad, good = await asyncio.gather(
        batcher.score_windows(SileroStream(), windows, 16000, on_window=explode),
        batcher.score_windows(SileroStream(), windows, 16000),
        return_exceptions=True,
    )
    assert isinstance(bad, RuntimeError)
    assert [float(c) for c in good] == sequential_scores(windows)  # type: ignore[union-attr]
    assert batcher.stats.windows == 3  # the failed call's second window was never scored


class FailOnce:
    """The real session, except that its first run raises (fault injection)."""

    def __init__(self) -> None:
        self.failed = False

    def run(self, *args: Any) -> Any:
        if not self.failed:
            self.failed = True
            raise RuntimeError("injected inference failure")
        return silero_session().run(*args)


async def test_a_failed_inference_fails_only_that_batch() -> None:
    batcher = SileroBatcher(session=FailOnce())  # type: ignore[arg-type]
    window = conversation(16000)[:1024]
    first = await asyncio.gather(
        *(batcher.score(SileroStream(), window, 16000) for _ in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, RuntimeError) for r in first)
    assert batcher.stats.failed_batches == 1
    analyzer = SharedSileroVADAnalyzer(batcher=batcher)
    analyzer.set_sample_rate(16000)
    assert await analyzer.analyze_audio(window) == VADState.QUIET
    assert batcher.stats.batches == 1
