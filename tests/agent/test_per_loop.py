"""A per-loop object is shared by everything on its event loop, and only there."""

from __future__ import annotations

import asyncio

from agent.per_loop import PerLoop


def test_one_object_per_running_loop_made_on_first_use() -> None:
    made: list[object] = []

    def factory() -> object:
        made.append(object())
        return made[-1]

    shared = PerLoop(factory)

    async def twice() -> tuple[object, object]:
        return shared.get(), shared.get()

    first = asyncio.run(twice())
    second = asyncio.run(twice())
    assert first[0] is first[1]
    assert second[0] is second[1]
    assert first[0] is not second[0]
    assert len(made) == 2
