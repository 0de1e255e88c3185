"""Our per-call observers, called inline instead of through Pipecat's queue and task each.

Mirrors ``pipecat.pipeline.worker_observer.WorkerObserver`` (Pipecat 1.14.0): its
``on_push_frame`` marks ``data.first_push`` from ``_frames_pushed`` and, once set up, hands
every event to a per-observer proxy (``_proxies``: a queue and a task each). We keep those
proxies for the observers Pipecat adds itself and call ours directly. Pipecat has no public
seam for this, so :func:`observe_inline` swaps the worker's private ``_observer``.

Equivalence: ``tests/agent/fastpath/test_inline_observers.py`` checks that the inline group sees
the same events, in the same order, as Pipecat's own observer machinery.
"""

from __future__ import annotations

from loguru import logger
from pipecat.observers.base_observer import (
    BaseObserver,
    FrameProcessed,
    FramePushed,
    ProcessorSetUp,
)
from pipecat.pipeline.worker import PipelineWorker
from pipecat.pipeline.worker_observer import WorkerObserver
from pipecat.utils.asyncio.task_manager import BaseTaskManager


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
        super().__init__(observe_every_push=False)
        self._observers: list[BaseObserver] = []
        self._on_push: list[BaseObserver] = []
        self._on_process: list[BaseObserver] = []
        self.add(observers)

    def add(self, observers: list[BaseObserver]) -> None:
        """Add members after those already there (before the group is set up)."""
        self._observers += observers
        self._on_push += [o for o in observers if _overrides(o, "on_push_frame")]
        self._on_process += [o for o in observers if _overrides(o, "on_process_frame")]
        self._observe_every_push = any(o.observe_every_push for o in self._observers)

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

    def add_inline(self, observers: list[BaseObserver]) -> None:
        """Call these inline too, after those already here (before the worker runs)."""
        self._inline.add(observers)
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

    Call it right after building the worker, before it runs (again to add more: the pipeline
    adds its own, the server the call's). Pipecat has no public seam for this, so it swaps the
    worker's ``_observer``; if a Pipecat upgrade moves it this raises
    (and ``tests/agent/transports/test_observer_group.py`` fails) instead of silently
    dropping observers.
    """
    current = getattr(worker, "_observer", None)
    if type(current) is InlineWorkerObserver and current._proxies is None:
        current.add_inline(observers)  # a second call before the worker runs: more members
        return
    if type(current) is not WorkerObserver or current._proxies is not None:
        raise RuntimeError(
            "this Pipecat version's PipelineWorker has no unstarted WorkerObserver at "
            "`_observer`; pass the observers to PipelineWorker(observers=...) instead"
        )
    worker._observer = InlineWorkerObserver(observers=current._observers, inline=observers)
