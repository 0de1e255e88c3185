"""What every transport shares: the pipeline seam, the per-call runner, the call log observer.

A transport module (``webrtc``, ``telephony``) turns a client connection into a Pipecat
``BaseTransport``, asks a :class:`TaskFactory` for the call's pipeline task, and runs it with
:func:`run_pipeline` inside a :class:`~agent.calls.CallRegistry` slot. The factory is the seam
tests plug a tiny pipeline into; the product uses ``pipelines.voice_agent``.
"""

from __future__ import annotations

from typing import Protocol

from pipecat.frames.frames import TranscriptionFrame, TTSTextFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport
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

    Frames are seen once per hop through the pipeline; only their first push is recorded.
    """

    def __init__(self, call: Call) -> None:
        super().__init__()
        self._call = call

    async def on_push_frame(self, data: FramePushed) -> None:
        if not data.first_push:
            return
        frame = data.frame
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._call.user_transcript.append(frame.text.strip())
        elif isinstance(frame, TTSTextFrame) and frame.text.strip():
            self._call.bot_transcript.append(frame.text.strip())
