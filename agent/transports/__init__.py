"""What every transport shares: the pipeline seam, the per-call runner, the call log observer.

A transport module (``webrtc``, ``telephony``) turns a client connection into a Pipecat
``BaseTransport``, asks a :class:`TaskFactory` for the call's pipeline task, and runs it with
:func:`run_pipeline` inside a :class:`~agent.calls.CallRegistry` slot. The factory is the seam
tests plug a tiny pipeline into; the product uses ``pipelines.voice_agent``.

A transport may tell the pipeline two things about its client (read with ``getattr``, so any
``BaseTransport`` works): ``pipeline_sample_rate`` (the rate its audio natively has, e.g. 8 kHz
for phone calls, so the pipeline does not resample twice) and ``speaks_rtvi`` (whether the
client understands Pipecat's RTVI messages; a phone does not).
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

from loguru import logger
from pipecat.frames.frames import (
    BotSpeakingFrame,
    Frame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    TTSTextFrame,
    UserSpeakingFrame,
    UserStartedSpeakingFrame,
)
from pipecat.observers.base_observer import (
    BaseObserver,
    FrameProcessed,
    FramePushed,
    ProcessorSetUp,
)
from pipecat.pipeline.worker import IDLE_TIMEOUT_SECS, PipelineWorker
from pipecat.pipeline.worker_observer import WorkerObserver
from pipecat.transports.base_transport import BaseTransport
from pipecat.utils.asyncio.task_manager import BaseTaskManager
from pipecat.workers.runner import WorkerRunner

from agent.calls import Call
from agent.config import Settings


class TaskFactory(Protocol):
    """Builds one call's pipeline task (``pipelines.voice_agent.build_voice_agent_task``)."""

    def __call__(
        self,
        transport: BaseTransport,
        settings: Settings,
        *,
        call_id: str,
        observers: list[BaseObserver] | None = None,
    ) -> PipelineWorker: ...


def build_voice_agent(
    transport: BaseTransport,
    settings: Settings,
    *,
    call_id: str,
    observers: list[BaseObserver] | None = None,
) -> PipelineWorker:
    """The product's :class:`TaskFactory`: ``pipelines.voice_agent``, imported on first use
    (that module imports this one, and the server can start without it)."""
    from pipelines.voice_agent import build_voice_agent_task

    return build_voice_agent_task(transport, settings, call_id=call_id, observers=observers)


async def run_pipeline(task: PipelineWorker) -> None:
    """Run one call's task to its end on a runner of its own (no signal handlers: the server
    owns SIGINT/SIGTERM). Cancelling the caller tears the pipeline down before returning."""
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(task)
    await runner.run()


class CallLogObserver(BaseObserver):
    """Keeps what was said in a call (final user transcripts, bot text) on the :class:`Call`.

    Only a frame's first push is recorded, so it asks Pipecat for first pushes only.
    """

    def __init__(self, call: Call) -> None:
        super().__init__(observe_every_push=False)
        self._call = call

    async def on_push_frame(self, data: FramePushed) -> None:
        if not data.first_push:
            return
        frame = data.frame
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._call.user_transcript.append(frame.text.strip())
        elif isinstance(frame, TTSTextFrame) and frame.text.strip():
            self._call.bot_transcript.append(frame.text.strip())


class ObserverGroup(BaseObserver):
    """Several observers behind one, so Pipecat runs one observer queue and task per call.

    Pipecat gives every observer its own queue and task and puts every frame push and every
    processed frame into each queue; on a phone call that per-observer cost was the largest
    single item in the server's profile. The group hands each event to its members in turn,
    in the order given, and only to members that handle it (a member that keeps
    ``BaseObserver.on_process_frame`` is never called for processed frames; one created with
    ``observe_every_push=False`` only sees first pushes).
    """

    def __init__(self, observers: list[BaseObserver]) -> None:
        super().__init__(observe_every_push=any(o.observe_every_push for o in observers))
        self._observers = list(observers)
        self._on_push = [o for o in observers if _overrides(o, "on_push_frame")]
        self._on_process = [o for o in observers if _overrides(o, "on_process_frame")]

    async def setup(self, task_manager: BaseTaskManager) -> None:
        await super().setup(task_manager)
        for observer in self._observers:
            await observer.setup(task_manager)

    async def cleanup(self) -> None:
        await super().cleanup()
        for observer in self._observers:
            await observer.cleanup()

    async def on_push_frame(self, data: FramePushed) -> None:
        first = data.first_push
        for observer in self._on_push:
            if first or observer.observe_every_push:
                await observer.on_push_frame(data)

    async def on_process_frame(self, data: FrameProcessed) -> None:
        for observer in self._on_process:
            await observer.on_process_frame(data)

    async def on_processor_setup(self, data: ProcessorSetUp) -> None:
        for observer in self._observers:
            await observer.on_processor_setup(data)

    async def on_pipeline_started(self) -> None:
        for observer in self._observers:
            await observer.on_pipeline_started()


def _overrides(observer: BaseObserver, method: str) -> bool:
    return getattr(type(observer), method) is not getattr(BaseObserver, method)


class InlineWorkerObserver(WorkerObserver):
    """Pipecat's worker observer, but our observers are called inline, in the pushing task.

    Pipecat's ``WorkerObserver`` puts every frame push and every processed frame into a queue
    per observer and wakes that observer's task for each one (even an observer that ignores
    processed frames gets them all); on a phone call that was ~17% of the server's CPU at 80
    calls (``bench/capacity.py --profile``). Our observers only compare types and take
    timestamps (the frame's push time travels in the event, so nothing is timed late), so
    ``inline`` observers are called directly; one that raises is logged and the call goes
    on. Observers Pipecat adds itself (``observers``: RTVI, turn tracking when tracing) keep
    their proxies.
    """

    def __init__(
        self,
        *,
        observers: list[BaseObserver] | None = None,
        inline: list[BaseObserver],
    ) -> None:
        super().__init__(observers=observers)
        self._inline = ObserverGroup(inline)
        self._inline_process = bool(self._inline._on_process)

    async def setup(self, task_manager: BaseTaskManager) -> None:
        await super().setup(task_manager)
        await self._inline.setup(task_manager)

    async def cleanup(self) -> None:
        await super().cleanup()
        await self._inline.cleanup()

    async def on_push_frame(self, data: FramePushed) -> None:
        if self._proxies:
            await super().on_push_frame(data)  # marks data.first_push
        else:
            frame = data.frame
            data.first_push = frame.id not in self._frames_pushed
            if data.first_push:
                self._frames_pushed[frame.id] = frame
        try:
            await self._inline.on_push_frame(data)
        except Exception as exc:
            logger.exception(f"observer failed on {data.frame}: {exc}")

    async def on_process_frame(self, data: FrameProcessed) -> None:
        if self._proxies:
            await super().on_process_frame(data)
        if self._inline_process:
            try:
                await self._inline.on_process_frame(data)
            except Exception as exc:
                logger.exception(f"observer failed on {data.frame}: {exc}")

    async def on_processor_setup(self, data: ProcessorSetUp) -> None:
        await super().on_processor_setup(data)
        await self._inline.on_processor_setup(data)

    async def on_pipeline_started(self) -> None:
        await super().on_pipeline_started()
        await self._inline.on_pipeline_started()


def observe_inline(worker: PipelineWorker, observers: list[BaseObserver]) -> None:
    """Make ``worker`` call ``observers`` inline (see :class:`InlineWorkerObserver`).

    Call it right after building the worker, before it runs. Pipecat has no public seam for
    this, so it swaps the worker's ``_observer``; if a Pipecat upgrade moves it this raises
    (and ``tests/agent/transports/test_observer_group.py`` fails) instead of silently
    dropping observers.
    """
    current = getattr(worker, "_observer", None)
    if type(current) is not WorkerObserver or current._proxies is not None:
        raise RuntimeError(
            "this Pipecat version's PipelineWorker has no unstarted WorkerObserver at "
            "`_observer`; pass the observers to PipelineWorker(observers=...) instead"
        )
    worker._observer = InlineWorkerObserver(observers=current._observers, inline=observers)


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
    """

    def __init__(self, worker: PipelineWorker, *, timeout_s: float = IDLE_TIMEOUT_SECS) -> None:
        super().__init__(observe_every_push=False)
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self._worker = worker
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
        self._cancelling = asyncio.get_running_loop().create_task(
            self._worker.cancel(reason="idle timeout")
        )
