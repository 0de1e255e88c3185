"""One Smart Turn v3 ONNX session per process, fed by every call: the verdicts asked for at
about the same time go through the model as one batch, on one thread.

Pipecat's ``LocalSmartTurnAnalyzerV3`` loads the model (``smart-turn-v3.2-cpu.onnx``, 8.7 MB,
shipped inside the pipecat-ai wheel) into an ONNX session of its own per call and runs it on a
thread of its own per call: ~48 MB of RAM per call in ``bench/capacity.py``. The model takes a
batch (``input_features [B, 80, 800]`` → ``logits [B, 1]``, sigmoid probabilities) and rows never
mix, so one session serves every call.

What batching buys here is the session and the thread, not CPU: one verdict costs 50-110 ms of a
core at B=1 by machine and about the same or more per row at B=2-16 (the model is
compute bound, unlike Silero), and a run needs ~19 MB of working memory per row. So a batch is
small (``max_batch`` 4) and never waits long: a verdict asked while the model is idle
runs at the end of the current event-loop pass (or after ``max_delay_s`` when verdicts are
arriving faster than that), and those asked while a batch is running go together in the next
one. The CPU is saved by asking less often (:mod:`agent.turns.adaptive_stop` asks only at pauses
where the verdict decides something).

Each verdict brings its own ``prepare`` callable, which turns that call's audio into the model's
input on the model's thread (resampling and log-mel features cost ~10 ms, which must not hold
the event loop); the call's analyzer (:mod:`agent.fastpath.shared_smart_turn`) keeps only its
audio window. A ``prepare`` that raises fails only its own verdict; an inference that fails
fails only the verdicts in that batch. :data:`STATS` counts the process's inferences (exported
as ``voice_agent_smart_turn_inferences_total``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources

import numpy as np
import onnxruntime

from agent.memory import release_free_memory
from agent.per_loop import PerLoop

MODEL_SAMPLE_RATE = 16000
"""The rate the model was trained on (audio is resampled to it before the features)."""
FEATURE_SHAPE = (80, 800)
"""One verdict's input: 80 log-mel bins x 800 frames (8 s of audio)."""

_GAP_SMOOTHING = 0.05
_session: onnxruntime.InferenceSession | None = None
_executor: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def smart_turn_model_path() -> str:
    """The ``smart-turn-v3.2-cpu.onnx`` that ships inside the pipecat-ai wheel (no download)."""
    data = resources.files("pipecat.audio.turn.smart_turn.data")
    return str(data.joinpath("smart-turn-v3.2-cpu.onnx"))


def smart_turn_session() -> onnxruntime.InferenceSession:
    """The process's one Smart Turn session, loaded on first use, with the options Pipecat's
    analyzer uses (sequential, one intra-op and one inter-op thread, all graph optimizations),
    so a verdict is the same number."""
    global _session
    with _lock:
        if _session is None:
            options = onnxruntime.SessionOptions()
            options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
            options.inter_op_num_threads = 1
            options.intra_op_num_threads = 1
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            # No memory arena: it keeps what the largest batch ever needed (~19 MB per row)
            # for the life of the process; without it a run's memory goes back when it ends.
            options.enable_cpu_mem_arena = False
            _session = onnxruntime.InferenceSession(
                smart_turn_model_path(), sess_options=options, providers=["CPUExecutionProvider"]
            )
        return _session


def _model_thread() -> ThreadPoolExecutor:
    """The process's one thread for Smart Turn (Pipecat starts one per call)."""
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="smart-turn")
        return _executor


@dataclass(slots=True)
class SmartTurnStats:
    """Counters of the process's Smart Turn work, for benchmarks and metrics."""

    inferences: int = 0
    batches: int = 0
    largest_batch: int = 0
    failed: int = 0


STATS = SmartTurnStats()
"""Every batcher in the process counts here (they share one session and one thread)."""

Prepare = Callable[[], np.ndarray]
"""Returns one verdict's model input (float32, :data:`FEATURE_SHAPE`); runs on the model's
thread."""


class _Queued:
    __slots__ = ("future", "prepare", "queued_at")

    def __init__(self, prepare: Prepare, future: asyncio.Future[float]) -> None:
        self.prepare = prepare
        self.future = future
        self.queued_at = time.perf_counter()


class SmartTurnBatcher:
    """Collects the verdicts asked on one event loop and runs them in batches on the model's
    thread (see the module docstring for when a batch runs)."""

    def __init__(
        self,
        *,
        session: onnxruntime.InferenceSession | None = None,
        max_delay_s: float = 0.005,
        max_batch: int = 4,
    ) -> None:
        if max_delay_s < 0 or max_batch < 1:
            raise ValueError("max_delay_s must be >= 0 and max_batch >= 1")
        self._session = session
        self._max_delay_s = max_delay_s
        self._max_batch = max_batch
        self._queued: list[_Queued] = []
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._running = False
        self._last_queued_at = 0.0
        self._mean_gap_s = 1.0  # between verdicts asked, smoothed: decides whether to wait

    @property
    def session(self) -> onnxruntime.InferenceSession:
        if self._session is None:
            self._session = smart_turn_session()
        return self._session

    async def probability(self, prepare: Prepare) -> float:
        """The model's probability that the turn is complete, for the input ``prepare`` makes.

        Raises what ``prepare`` raised, or what the inference raised.
        """
        loop = asyncio.get_running_loop()
        item = _Queued(prepare, loop.create_future())
        self._queued.append(item)
        gap = item.queued_at - self._last_queued_at
        self._mean_gap_s += _GAP_SMOOTHING * (min(gap, 1.0) - self._mean_gap_s)
        self._last_queued_at = item.queued_at
        if not self._running and self._timer is None:
            if self._max_delay_s > self._mean_gap_s:
                self._timer = loop.call_later(self._max_delay_s, self._flush)
            else:  # none other expected in time: run at the end of this pass
                self._timer = loop.call_soon(self._flush)
        return await item.future

    def _flush(self) -> None:
        self._timer = None
        if self._running:
            return
        items = [item for item in self._queued[: self._max_batch] if not item.future.done()]
        del self._queued[: self._max_batch]
        if not items:
            if self._queued:
                self._flush()
            return
        self._running = True
        loop = asyncio.get_running_loop()
        run = loop.run_in_executor(_model_thread(), self._infer, [i.prepare for i in items])
        run.add_done_callback(lambda done: self._finished(items, done))

    def _finished(
        self, items: list[_Queued], done: asyncio.Future[list[float | Exception]]
    ) -> None:
        self._running = False
        try:
            results = done.result()
        except Exception as exc:  # the executor itself failed (e.g. shut down)
            results = [exc] * len(items)
        for item, result in zip(items, results, strict=True):
            if item.future.done():
                continue  # its caller was cancelled
            if isinstance(result, Exception):
                item.future.set_exception(result)
            else:
                item.future.set_result(result)
        if self._queued:  # asked while this batch ran: they have waited already
            self._flush()

    def _infer(self, prepares: list[Prepare]) -> list[float | Exception]:
        """On the model's thread: each row's input, then one run for the rows that have one."""
        results: list[float | Exception] = []
        rows: list[np.ndarray] = []
        for prepare in prepares:
            try:
                features = prepare()
                if features.shape != FEATURE_SHAPE:
                    raise ValueError(
                        f"Smart Turn input must be {FEATURE_SHAPE} features, got {features.shape}"
                    )
                rows.append(features.astype(np.float32, copy=False))
                results.append(np.nan)  # filled in below
            except Exception as exc:
                STATS.failed += 1
                results.append(exc)
        if not rows:
            return results
        try:
            (logits,) = self.session.run(None, {"input_features": np.stack(rows)})
        except Exception as exc:
            STATS.failed += len(rows)
            return [r if isinstance(r, Exception) else exc for r in results]
        release_free_memory()  # the run's working memory, kept by malloc otherwise
        STATS.batches += 1
        STATS.inferences += len(rows)
        STATS.largest_batch = max(STATS.largest_batch, len(rows))
        probabilities = iter(logits[:, 0].tolist())
        return [r if isinstance(r, Exception) else next(probabilities) for r in results]


_batchers: PerLoop[SmartTurnBatcher] = PerLoop(SmartTurnBatcher)


def shared_batcher() -> SmartTurnBatcher:
    """The running event loop's batcher (created on first use), over the process's session."""
    return _batchers.get()
