"""An asyncio event loop whose clock jumps ahead whenever the loop would wait for a timer.

A conversation's timing (pauses, a recognizer taking 1.5 s, Pipecat's 5 s fallback) then runs
in milliseconds, so a property test can try hundreds of timings, and it is exact: nothing
depends on how busy the machine is. Everything that reads the loop's clock (``asyncio.sleep``,
``wait_for``, Pipecat's task manager) runs on virtual time; code that reads the wall clock
(``time.time``) is given :meth:`VirtualTimeLoop.wall` instead by the test.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

WALL_EPOCH = 1_800_000_000.0
"""What :meth:`VirtualTimeLoop.wall` says at virtual time 0 (a plausible Unix time)."""


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; where the loop would sleep until its next timer, the clock
    jumps there instead. With no timer at all, it waits a real moment (a thread may wake it)."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready:
            return ready
        if timeout is None:
            return super().select(0.01)
        self.now += timeout
        return []


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """``loop.time()`` is virtual; :meth:`wall` is the matching ``time.time()``."""

    def __init__(self) -> None:
        self._clock = _JumpingSelector()
        super().__init__(selector=self._clock)

    def time(self) -> float:
        return self._clock.now

    def wall(self) -> float:
        return WALL_EPOCH + self._clock.now


class VirtualWallClock:
    """Stands in for the ``time`` module in code under test: ``time.time()`` and
    ``time.monotonic()`` read the running virtual loop."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        self._loop = loop

    def time(self) -> float:
        return self._loop.wall()

    def monotonic(self) -> float:
        return self._loop.time()
