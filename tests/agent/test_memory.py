"""Smart Turn's working memory goes back to the system, at most once every few seconds."""

from __future__ import annotations

import asyncio
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agent import memory
from agent.turns.smart_turn_batcher import FEATURE_SHAPE, smart_turn_session


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@pytest.fixture(autouse=True)
def trim_due(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory, "_last_trim", 0.0)


def test_a_trim_gives_back_what_model_runs_on_a_thread_left_with_malloc() -> None:
    session = smart_turn_session()
    rng = random.Random(1)

    def run(rows: int) -> None:
        features = np.zeros((rows, *FEATURE_SHAPE), dtype=np.float32)
        session.run(None, {"input_features": features})

    with ThreadPoolExecutor(1, thread_name_prefix="smart-turn") as thread:
        for _ in range(12):
            thread.submit(run, rng.randint(1, 4)).result()
            _other_work = [bytearray(rng.randint(100, 5000)) for _ in range(200)]
        held = rss_mb()
        assert thread.submit(memory.release_free_memory).result()
    assert rss_mb() < held - 20, "the runs' freed working memory is still held"


def test_trims_are_spaced_by_the_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [1000.0]
    monkeypatch.setattr(memory.time, "monotonic", lambda: clock[0])
    assert memory.release_free_memory()
    clock[0] += memory.TRIM_EVERY_S / 2
    assert not memory.release_free_memory()
    clock[0] += memory.TRIM_EVERY_S
    assert memory.release_free_memory()


async def test_when_the_last_call_has_ended_and_none_came_since_the_memory_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "_malloc_trim", trims.append)
    monkeypatch.setattr(memory, "_last_trim", memory.time.monotonic())  # one just now
    calls = ["a", "b"]
    on_call_end = memory.trim_when_idle(lambda: not calls, after_s=0.05)

    calls.remove("a")
    on_call_end("a")  # "b" still runs
    await asyncio.sleep(0.1)
    assert trims == []
    calls.remove("b")
    on_call_end("b")  # the last one
    on_call_end("b")  # told twice: still one trim
    await asyncio.sleep(0.1)
    assert trims == [0], "an idle server kept its calls' freed memory"
    on_call_end("c")
    calls.append("d")  # a new call came before the trim was due
    await asyncio.sleep(0.1)
    assert trims == [0]
