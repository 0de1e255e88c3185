"""Observers called inline: grouped (:class:`ObserverGroup`) and handed every event the way
Pipecat's ``WorkerObserver`` hands it to its proxied observers (:func:`observe_inline`)."""

from __future__ import annotations

from typing import Any

import pytest
from pipecat.frames.frames import (
    Frame,
    TextFrame,
)
from pipecat.observers.base_observer import BaseObserver, FrameProcessed, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.utils.asyncio.task_manager import TaskManager

from agent.fastpath.inline_observers import InlineWorkerObserver, ObserverGroup, observe_inline
from tests.agent.fastpath.workers import Echo, run_worker

pytestmark = pytest.mark.timeout(30)


class Recorder(BaseObserver):
    """Records every push it is handed (and processed frames, if asked to)."""

    def __init__(self, *, every_push: bool = True) -> None:
        super().__init__(observe_every_push=every_push)
        self.pushes: list[FramePushed] = []
        self.set_up = self.cleaned_up = self.started = False

    async def setup(self, task_manager: Any) -> None:
        await super().setup(task_manager)
        self.set_up = True

    async def cleanup(self) -> None:
        await super().cleanup()
        self.cleaned_up = True

    async def on_push_frame(self, data: FramePushed) -> None:
        self.pushes.append(data)

    async def on_pipeline_started(self) -> None:
        self.started = True


class ProcessRecorder(Recorder):
    def __init__(self) -> None:
        super().__init__()
        self.processed: list[FrameProcessed] = []

    async def on_process_frame(self, data: FrameProcessed) -> None:
        self.processed.append(data)


def pushed(frame: Frame, *, first: bool) -> FramePushed:
    data = FramePushed(
        source=FrameProcessor(),
        destination=FrameProcessor(),
        frame=frame,
        direction=FrameDirection.DOWNSTREAM,
        timestamp=0,
    )
    data.first_push = first
    return data


async def test_a_first_push_only_member_sees_only_first_pushes() -> None:
    every, first_only = Recorder(every_push=True), Recorder(every_push=False)
    group = ObserverGroup([every, first_only])
    assert group.observe_every_push  # some member wants them all, so Pipecat must send them
    frame = TextFrame("hi")
    await group.on_push_frame(pushed(frame, first=True))
    await group.on_push_frame(pushed(frame, first=False))
    assert [d.first_push for d in every.pushes] == [True, False]
    assert [d.first_push for d in first_only.pushes] == [True]
    assert not ObserverGroup([Recorder(every_push=False)]).observe_every_push


async def test_processed_frames_reach_only_members_that_handle_them() -> None:
    handles, ignores = ProcessRecorder(), Recorder()  # Recorder keeps the base no-op

    async def never(_data: FrameProcessed) -> None:
        raise AssertionError("called for a processed frame it never asked for")

    ignores.on_process_frame = never  # type: ignore[method-assign,assignment]
    group = ObserverGroup([ignores, handles])
    data = FrameProcessed(
        processor=FrameProcessor(),
        frame=TextFrame("x"),
        direction=FrameDirection.DOWNSTREAM,
        timestamp=0,
    )
    await group.on_process_frame(data)
    assert handles.processed == [data]


async def test_setup_cleanup_and_start_reach_every_member() -> None:
    members: list[Recorder] = [Recorder(), ProcessRecorder(), Recorder(every_push=False)]
    group = ObserverGroup(list[BaseObserver](members))
    await group.setup(TaskManager())
    await group.on_pipeline_started()
    await group.cleanup()
    assert all(m.set_up and m.started and m.cleaned_up for m in members)


async def test_a_worker_calls_inline_observers_with_every_frame_and_first_push_marks() -> None:
    every, first_only, processes = Recorder(), Recorder(every_push=False), ProcessRecorder()
    worker = PipelineWorker(Pipeline([Echo(), Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    observe_inline(worker, [every, first_only, processes])
    assert isinstance(worker._observer, InlineWorkerObserver)
    text = TextFrame("hello")
    await run_worker(worker, text)

    assert all(m.set_up and m.started and m.cleaned_up for m in (every, first_only, processes))
    pushes_of_text = [d for d in every.pushes if d.frame is text]
    assert len(pushes_of_text) >= 2  # through both processors (and the pipeline's ends)
    assert [d.first_push for d in pushes_of_text].count(True) == 1
    assert [d.frame for d in first_only.pushes].count(text) == 1
    assert any(d.frame is text for d in processes.processed)


async def test_a_second_call_before_the_worker_runs_adds_members_after_the_first() -> None:
    """The pipeline attaches its own observers, then the server the call's: all are called."""
    first, second = Recorder(every_push=False), Recorder()
    worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    observe_inline(worker, [first])
    observe_inline(worker, [second])
    text = TextFrame("hello")
    await run_worker(worker, text)
    assert first.set_up and second.set_up and first.cleaned_up and second.cleaned_up
    assert [d.frame for d in first.pushes].count(text) == 1
    assert [d.frame for d in second.pushes].count(text) >= 2


async def test_observe_inline_refuses_a_worker_that_already_runs_its_observers() -> None:
    worker = PipelineWorker(Pipeline([Echo()]), idle_timeout_secs=None, enable_rtvi=False)
    await worker._observer.setup(TaskManager())  # what running the worker does first
    with pytest.raises(RuntimeError, match="observers"):
        observe_inline(worker, [])  # Pipecat's observers already run with their proxies


async def test_inline_observers_see_what_pipecats_proxied_observers_see() -> None:
    """The same frames, with the same first-push marks, as an observer run by Pipecat."""
    stock, inline = Recorder(), Recorder()
    stock_worker = PipelineWorker(
        Pipeline([Echo(), Echo()]), observers=[stock], idle_timeout_secs=None, enable_rtvi=False
    )
    inline_worker = PipelineWorker(
        Pipeline([Echo(), Echo()]), idle_timeout_secs=None, enable_rtvi=False
    )
    observe_inline(inline_worker, [inline])
    await run_worker(stock_worker, TextFrame("hello"), TextFrame("again"))
    await run_worker(inline_worker, TextFrame("hello"), TextFrame("again"))

    def seen(recorder: Recorder) -> list[tuple[str, str, str, bool]]:
        return [
            (
                type(d.frame).__name__,
                d.source.name.split("#")[0],
                d.destination.name.split("#")[0],
                d.first_push,
            )
            for d in recorder.pushes
            if isinstance(d.frame, TextFrame)
        ]

    assert seen(inline) == seen(stock) and seen(stock)
