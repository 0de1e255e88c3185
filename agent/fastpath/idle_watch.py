"""The call's idle timeout as one timer, instead of Pipecat's proxied observer and task.

Mirrors ``PipelineWorker(idle_timeout_secs=..., idle_timeout_frames=...)`` in Pipecat 1.14.0
(``pipecat.pipeline.worker``: the ``IdleFrameObserver`` and ``_idle_monitor_handler``): the
same frames count as life, the same default timeout, the worker is cancelled the same way.

Equivalence: ``tests/agent/fastpath/test_idle_watch.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loguru import logger
from pipecat.frames.frames import (
    BotSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    UserSpeakingFrame,
    UserStartedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import IDLE_TIMEOUT_SECS, PipelineWorker

IDLE_FRAMES: tuple[type[Frame], ...] = (
    StartFrame,
    BotSpeakingFrame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserSpeakingFrame,
    UserStartedSpeakingFrame,
)
"""Frames that show a call is alive: Pipecat's default ``idle_timeout_frames`` (+ start)."""


class IdleCallWatch(BaseObserver):
    """Cancels a call's worker when nothing happened for ``timeout_s``: Pipecat's idle
    timeout (same frames, same default 300 s), without its observer queue and task.

    Pipecat's own watch (``PipelineWorker(idle_timeout_secs=...)``) is one more proxied
    observer fed every first push of every frame, plus a task waiting on an event it sets;
    this one records the time of the last live frame and checks it from one timer, re-armed
    only when it fires, so a busy call costs one ``isinstance`` per frame. Build the worker
    with ``idle_timeout_secs=None`` and pass this among its inline observers.
    ``on_timeout`` is called when it fires, just before the worker is cancelled.
    """

    def __init__(
        self,
        worker: PipelineWorker,
        *,
        timeout_s: float = IDLE_TIMEOUT_SECS,
        on_timeout: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(observe_every_push=False)
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self._worker = worker
        self._on_timeout = on_timeout
        self._timeout_s = timeout_s
        self._last_alive = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._cancelling: asyncio.Task[None] | None = None
        self.timed_out = False

    async def on_push_frame(self, data: FramePushed) -> None:
        if isinstance(data.frame, IDLE_FRAMES):
            self._last_alive = time.monotonic()

    async def on_pipeline_started(self) -> None:
        self._last_alive = time.monotonic()
        self._arm(self._timeout_s)

    async def cleanup(self) -> None:
        await super().cleanup()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, delay_s: float) -> None:
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._check)

    def _check(self) -> None:
        idle_s = time.monotonic() - self._last_alive
        if idle_s < self._timeout_s:
            self._arm(self._timeout_s - idle_s)
            return
        self._timer = None
        self.timed_out = True
        logger.warning(f"{self._worker}: idle for {idle_s:.0f} s; cancelling the call")
        if self._on_timeout is not None:
            self._on_timeout()  # e.g. the call record's end reason, before the cancel
        self._cancelling = asyncio.get_running_loop().create_task(
            self._worker.cancel(reason="idle timeout")
        )
