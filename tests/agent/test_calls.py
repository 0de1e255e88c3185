"""The call registry: the limit, the counters, and release however a call ends."""

from __future__ import annotations

import asyncio

import pytest

from agent.calls import CallLimitReached, CallRegistry


async def test_the_limit_refuses_and_counts() -> None:
    registry = CallRegistry(max_calls=2)
    first, second = registry.reserve("webrtc"), registry.reserve("twilio")
    with pytest.raises(CallLimitReached, match="limit of 2 concurrent calls"):
        registry.reserve("webrtc")
    assert (registry.stats.active, registry.stats.started, registry.stats.refused) == (2, 2, 1)
    first.release()
    first.release()  # idempotent
    assert (registry.stats.active, registry.stats.ended) == (1, 1)
    registry.reserve("webrtc")
    second.release()
    assert registry.stats.active == 1 and registry.stats.ended == 2


@pytest.mark.parametrize("ending", ["returns", "raises", "is cancelled"])
async def test_a_spawned_call_is_released_however_it_ends(ending: str) -> None:
    registry = CallRegistry(max_calls=1)
    call = registry.reserve("webrtc")
    gate = asyncio.Event()

    async def work() -> None:
        await gate.wait()
        if ending == "raises":
            raise RuntimeError("pipeline exploded")

    task = registry.spawn(call, work())
    await asyncio.sleep(0)
    assert registry.stats.active == 1
    if ending == "is cancelled":
        task.cancel()
    else:
        gate.set()
    await asyncio.gather(task, return_exceptions=True)
    assert registry.stats.active == 0 and registry.stats.ended == 1
    assert registry.recent() == [call]


async def test_shutdown_cancels_every_call_waits_and_refuses_new_ones() -> None:
    registry = CallRegistry(max_calls=3)
    cleaned: list[str] = []

    async def work(name: str) -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.01)  # teardown that takes a moment
            cleaned.append(name)

    tasks = [registry.spawn(registry.reserve("webrtc"), work(f"c{i}")) for i in range(2)]
    reserved_only = registry.reserve("twilio")
    await asyncio.sleep(0)
    await registry.shutdown(grace_s=5)
    assert sorted(cleaned) == ["c0", "c1"]
    assert all(t.done() for t in tasks)
    assert reserved_only.released and registry.stats.active == 0
    with pytest.raises(CallLimitReached):
        registry.reserve("webrtc")


@pytest.mark.parametrize(
    ("ending", "reason"),
    [("returns", "agent ended the call"), ("raises", "error"), ("is cancelled", "cancelled")],
)
async def test_a_call_that_ends_without_saying_why_gets_a_reason(ending: str, reason: str) -> None:
    registry = CallRegistry(max_calls=1)
    call = registry.reserve("webrtc")

    async def work() -> None:
        await asyncio.sleep(0.01 if ending != "is cancelled" else 3600)
        if ending == "raises":
            raise RuntimeError("pipeline exploded")

    task = registry.spawn(call, work())
    if ending == "is cancelled":
        await asyncio.sleep(0)
        task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert call.end_reason == reason


async def test_the_first_reason_wins_and_listeners_hear_of_each_end_once() -> None:
    registry = CallRegistry(max_calls=3)
    ended: list[tuple[str, str | None, bool]] = []
    registry.when_ended(lambda call: ended.append((call.id, call.end_reason, call.released)))
    registry.when_ended(lambda call: 1 / 0)  # a broken listener harms nothing

    transferred = registry.reserve("twilio")
    transferred.end_because("transferred to +15550100")
    transferred.end_because("caller hung up")  # Twilio's stop after the transfer
    transferred.release()
    transferred.release()
    assert ended == [(transferred.id, "transferred to +15550100", True)]


@pytest.mark.parametrize(("drain", "reason"), [(True, "drain"), (False, "server shutdown")])
async def test_calls_ended_by_the_server_say_so(drain: bool, reason: str) -> None:
    registry = CallRegistry(max_calls=2)
    hung_up, running = registry.reserve("twilio"), registry.reserve("twilio")
    tasks = [registry.spawn(call, asyncio.sleep(3600)) for call in (hung_up, running)]
    await asyncio.sleep(0)  # the calls are running
    hung_up.end_because("caller hung up")
    if drain:
        await registry.drain(timeout_s=0.05)
    else:
        await registry.shutdown(grace_s=5)
    await asyncio.gather(*tasks, return_exceptions=True)
    assert (hung_up.end_reason, running.end_reason) == ("caller hung up", reason)
