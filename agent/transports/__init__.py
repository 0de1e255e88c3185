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

from typing import Protocol

from pipecat.frames.frames import TranscriptionFrame, TTSTextFrame
from pipecat.observers.base_observer import (
    BaseObserver,
    FrameProcessed,
    FramePushed,
    ProcessorSetUp,
)
from pipecat.pipeline.worker import PipelineWorker
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


def voice_agent_task_factory() -> TaskFactory:
    """The product's pipeline, imported on first use so the server starts without it."""
    from pipelines.voice_agent import build_voice_agent_task

    return build_voice_agent_task


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
