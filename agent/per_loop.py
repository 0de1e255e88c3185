"""One object per running event loop, created on first use.

The shared model batchers (Silero VAD, Smart Turn) collect the work of every call on one event
loop; a process normally runs one loop, but tests and workers may run several, and a batcher's
futures belong to the loop that made them. The object goes when its loop is collected.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable


class PerLoop[T]:
    """``get()`` returns the running loop's object, made by ``factory`` the first time."""

    def __init__(self, factory: Callable[[], T]) -> None:
        self._factory = factory
        self._objects: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def get(self) -> T:
        loop = asyncio.get_running_loop()
        made = self._objects.get(loop)
        if made is None:
            made = self._objects[loop] = self._factory()
        return made
