"""Running one call's pipeline: the factory seam transports call, and the runner.

A transport module turns a connection into a Pipecat transport, asks its
:class:`CallTaskFactory` for the call's worker and runs it with :func:`run_call_pipeline`
inside a :class:`~agent.calls.CallRegistry` slot. The server builds the factory (pipeline and
observers: :mod:`agent.server`); tests plug a tiny pipeline in at ``create_app``.
"""

from __future__ import annotations

from typing import Protocol

from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport
from pipecat.workers.runner import WorkerRunner

from agent.calls import Call


class CallTaskFactory(Protocol):
    """Builds the pipeline worker for one call on ``transport``, observers attached."""

    def __call__(self, transport: BaseTransport, call: Call) -> PipelineWorker: ...


async def run_call_pipeline(worker: PipelineWorker) -> None:
    """Run one call's worker to its end on a runner of its own (no signal handlers: the
    server owns SIGINT/SIGTERM). Cancelling the caller tears the pipeline down first."""
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()
