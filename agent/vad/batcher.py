"""One Silero ONNX session per process, fed by every call: the 32 ms windows that are due at
about the same time go through the model as one batch.

Pipecat's bundled ``silero_vad.onnx`` takes ``input [B, context + window]``, ``state [2, B,
128]`` and ``sr``, and rows never mix (a batched run gives bit-identical rows to B single
runs). One intra-op thread scores one window in ~0.11-0.16 ms at B=1 but ~40-50 µs per window
at B >= 8, so batching cuts the model's CPU ~3x; and one session instead of one per call saves
~10 MB of RAM per call. Each call keeps only its own recurrent memory (:class:`SileroStream`,
about 1.3 kB).

How a batch forms (:class:`SileroBatcher`, one per event loop): a call submits all the whole
windows of an audio buffer at once and awaits one future. The first submission queued starts a
timer of ``max_delay_s`` (default 20 ms); when it fires, the first window of every queued call
runs as one inference per sample rate, then every call's second window, and so on, on the
event loop; each window's confidence is handed to the call's callback before its next window is
scored (Silero's analyzer may reset a stream's memory between windows), and each future gets
its confidences. A run has a fixed cost of ~150 µs beside ~60 µs per window (this VM kind), so
bigger batches matter: with 60 ms phone frames a 4 ms window gathered ~3 calls per run, 20 ms
gathers a third of them and cut the server's CPU per call by ~10% at 40 calls
(``bench/capacity.py``), for at most 20 ms later VAD events. Waking up costs CPU too, so the
batcher waits only while submissions arrive more often than ``max_delay_s`` (a smoothed gap);
at low load it runs at the end of the current event-loop pass instead, batching only what
arrived together, so a lone call never waits. The queueing delay of a submission is bounded by
``max_delay_s`` plus event-loop lag plus the inference rounds of its flush; a full batch
(``max_batch`` calls) runs at once. Nothing waits for any particular call: a call that stops
sending simply has nothing queued, and a call whose task is cancelled still has its windows
scored (its memory follows the audio it sent, as with Pipecat's executor) but nobody waits for
them. Windows are validated when submitted, in the caller's task, so bad input fails only that
call; if an inference itself fails, only the calls in that run get the error.

Inference runs inline on the event loop rather than in a thread: the server is sized at one
process per core, where a thread adds two wake-ups per hand-off and no capacity (the stock
analyzer pays them on every 20 ms frame, in its per-call executor), and a batch of 100
windows holds the loop for only ~5 ms.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources

import numpy as np
import onnxruntime

from agent.per_loop import PerLoop

SAMPLE_RATES = (8000, 16000)
WINDOW_SAMPLES = {16000: 512, 8000: 256}
"""New samples per model window (32 ms at either rate)."""
CONTEXT_SAMPLES = {16000: 64, 8000: 32}
"""Samples of the previous window the model sees again in front of each new one."""
STATE_SHAPE = (2, 128)
"""The recurrent state of one stream (the model's ``state`` is ``[2, B, 128]``)."""

_GAP_SMOOTHING = 0.05
_INT16_SCALE = np.float32(1.0 / 32768.0)  # exact, so equal to Pipecat's `/ 32768.0`
_session: onnxruntime.InferenceSession | None = None
_session_lock = threading.Lock()


def silero_model_path() -> str:
    """The ``silero_vad.onnx`` that ships inside the pipecat-ai wheel (nothing is downloaded)."""
    return str(resources.files("pipecat.audio.vad.data").joinpath("silero_vad.onnx"))


def silero_session() -> onnxruntime.InferenceSession:
    """The process's one Silero session (CPU, one intra-op thread), loaded on first use.

    ``InferenceSession.run`` is thread-safe, so batchers on several event loops share it.
    """
    global _session
    with _session_lock:
        if _session is None:
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            _session = onnxruntime.InferenceSession(
                silero_model_path(), sess_options=options, providers=["CPUExecutionProvider"]
            )
        return _session


class SileroStream:
    """One call's model memory: the last context samples and the recurrent state.

    A fresh or reset stream is all zeros, which is what Silero starts from.
    """

    __slots__ = ("context", "sample_rate", "state")

    def __init__(self) -> None:
        self.sample_rate = 0
        self.context = np.zeros(0, np.float32)
        self.state = np.zeros(STATE_SHAPE, np.float32)

    def reset(self, sample_rate: int | None = None) -> None:
        """Forget everything heard so far (optionally switching sample rate)."""
        if sample_rate is not None and sample_rate != self.sample_rate:
            self.sample_rate = sample_rate
            self.context = np.zeros(CONTEXT_SAMPLES[sample_rate], np.float32)
        else:
            self.context.fill(0.0)
        self.state.fill(0.0)

    @property
    def nbytes(self) -> int:
        return self.context.nbytes + self.state.nbytes


def check_window(window: bytes, sample_rate: int) -> None:
    """Raise ``ValueError`` unless ``window`` is one model window of PCM16 at ``sample_rate``."""
    if sample_rate not in WINDOW_SAMPLES:
        raise ValueError(
            f"Silero VAD runs at 8000 or 16000 Hz, not {sample_rate}; resample the input first"
        )
    expected = 2 * WINDOW_SAMPLES[sample_rate]
    if len(window) != expected:
        raise ValueError(
            f"a Silero window at {sample_rate} Hz is {expected} bytes of PCM16, got {len(window)}"
        )


def infer(
    session: onnxruntime.InferenceSession,
    sample_rate: int,
    streams: Sequence[SileroStream],
    windows: Sequence[bytes],
) -> np.ndarray:
    """Score one window per stream in a single run; advance each stream's memory.

    Returns the confidences as a float32 array of length ``len(streams)``. Each stream must
    appear once (its windows are sequential), and windows must have passed ``check_window``.
    """
    size, context = WINDOW_SAMPLES[sample_rate], CONTEXT_SAMPLES[sample_rate]
    batch = len(streams)
    inputs = np.empty((batch, context + size), np.float32)
    states = np.empty((2, batch, STATE_SHAPE[1]), np.float32)
    pcm = np.frombuffer(b"".join(windows), np.int16).reshape(batch, size)
    np.multiply(pcm, _INT16_SCALE, out=inputs[:, context:])
    for row, stream in enumerate(streams):
        if stream.sample_rate != sample_rate:
            stream.reset(sample_rate)
        inputs[row, :context] = stream.context
        states[:, row] = stream.state
    feeds = {"input": inputs, "state": states, "sr": np.array(sample_rate, np.int64)}
    output, new_states = session.run(None, feeds)
    for row, stream in enumerate(streams):
        stream.state[...] = new_states[:, row]
        stream.context[...] = inputs[row, -context:]
    confidences: np.ndarray = output[:, 0]
    return confidences


@dataclass(slots=True)
class BatcherStats:
    """Counters a batcher keeps, for benchmarks and metrics."""

    batches: int = 0
    windows: int = 0
    largest_batch: int = 0
    failed_batches: int = 0


WindowCallback = Callable[[bytes, np.float32], None]
"""Called with each window and its confidence as soon as it is scored, before the stream's next
window is (so it may reset the stream's memory, as Silero's analyzer does between windows)."""


class _Queued:
    """Consecutive windows of one stream, scored one per inference round, in order."""

    __slots__ = ("confidences", "failed", "future", "on_window", "queued_at", "stream", "windows")

    def __init__(
        self,
        stream: SileroStream,
        windows: Sequence[bytes],
        on_window: WindowCallback | None,
        future: asyncio.Future[list[np.float32]],
    ) -> None:
        self.stream = stream
        self.windows = windows
        self.on_window = on_window
        self.future = future
        self.confidences: list[np.float32] = []
        self.failed = False
        self.queued_at = time.perf_counter()

    @property
    def pending(self) -> bool:
        """Windows are left to score (none once the item failed). A cancelled caller's windows
        are still scored, as Pipecat's executor would still run them."""
        return not self.failed and len(self.confidences) < len(self.windows)

    @property
    def next_window(self) -> bytes:
        return self.windows[len(self.confidences)]


class SileroBatcher:
    """Collects windows from many calls on one event loop and scores them in batches.

    A call submits all the whole windows of an audio buffer at once
    (:meth:`score_windows`) and awaits one result; a flush scores the first window of every
    queued call in one inference, then the second windows, and so on. ``on_delay``
    (optional) is called with each submission's queueing delay in seconds (submit to
    result), for benchmarks and histograms.
    """

    def __init__(
        self,
        *,
        session: onnxruntime.InferenceSession | None = None,
        max_delay_s: float = 0.020,
        max_batch: int = 256,
        on_delay: Callable[[float], None] | None = None,
    ) -> None:
        if max_delay_s < 0 or max_batch < 1:
            raise ValueError("max_delay_s must be >= 0 and max_batch >= 1")
        self._session = session
        self._max_delay_s = max_delay_s
        self._max_batch = max_batch
        self._on_delay = on_delay
        self._queued: dict[int, list[_Queued]] = {}
        self._timer: asyncio.TimerHandle | asyncio.Handle | None = None
        self._last_queued_at = 0.0
        self._mean_gap_s = 1.0  # between submissions, smoothed: decides whether to wait
        self.stats = BatcherStats()

    @property
    def session(self) -> onnxruntime.InferenceSession:
        if self._session is None:
            self._session = silero_session()
        return self._session

    async def score(self, stream: SileroStream, window: bytes, sample_rate: int) -> np.float32:
        """The speech confidence of ``window`` (one model window of PCM16), in this stream.

        Raises ``ValueError`` for a window of the wrong size or rate; nothing is queued then.
        """
        return (await self.score_windows(stream, [window], sample_rate))[0]

    async def score_windows(
        self,
        stream: SileroStream,
        windows: Sequence[bytes],
        sample_rate: int,
        on_window: WindowCallback | None = None,
    ) -> list[np.float32]:
        """The confidences of consecutive ``windows`` of one stream, scored in order.

        ``on_window`` sees each window's confidence before the next window is scored. If it
        raises, or an inference fails, the call gets that error and its remaining windows are
        not scored. Raises ``ValueError`` for a window of the wrong size or rate; nothing is
        queued then.
        """
        for window in windows:
            check_window(window, sample_rate)
        if not windows:
            return []
        loop = asyncio.get_running_loop()
        item = _Queued(stream, windows, on_window, loop.create_future())
        queue = self._queued.setdefault(sample_rate, [])
        queue.append(item)
        if len(queue) >= self._max_batch:
            del self._queued[sample_rate]
            self._score(sample_rate, queue)
        elif self._timer is None:
            if self._max_delay_s > self._mean_gap_s:
                self._timer = loop.call_later(self._max_delay_s, self._flush)
            else:  # no other call expected in time: don't pay a wake-up to wait for none
                self._timer = loop.call_soon(self._flush)
        gap = item.queued_at - self._last_queued_at
        self._mean_gap_s += _GAP_SMOOTHING * (min(gap, 1.0) - self._mean_gap_s)
        self._last_queued_at = item.queued_at
        return await item.future

    def _flush(self) -> None:
        self._timer = None
        queued, self._queued = self._queued, {}
        for sample_rate, items in queued.items():
            self._score(sample_rate, items)

    def _score(self, sample_rate: int, items: list[_Queued]) -> None:
        """Score the queued calls' windows in rounds of one window per stream.

        A stream queued twice (its caller was cancelled and came back) keeps its later
        submission for the next flush, so its windows stay in order.
        """
        active: list[_Queued] = []
        seen: set[int] = set()
        for item in items:
            if id(item.stream) in seen:
                self._requeue(sample_rate, item)
            else:
                seen.add(id(item.stream))
                active.append(item)
        while active:
            for start in range(0, len(active), self._max_batch):
                self._run_round(sample_rate, active[start : start + self._max_batch])
            active = [item for item in active if item.pending]
        if self._on_delay is not None:
            now = time.perf_counter()
            for item in items:
                if item.future.done() and not item.future.cancelled():
                    self._on_delay(now - item.queued_at)

    def _run_round(self, sample_rate: int, items: list[_Queued]) -> None:
        """One inference: the next window of each item (a cancelled caller's stream is still
        advanced, so its memory matches the audio it sent)."""
        windows = [item.next_window for item in items]
        try:
            confidences = infer(self.session, sample_rate, [item.stream for item in items], windows)
        except Exception as exc:
            self.stats.failed_batches += 1
            for item in items:
                _fail(item, exc)
            return
        stats = self.stats
        stats.batches += 1
        stats.windows += len(items)
        stats.largest_batch = max(stats.largest_batch, len(items))
        for item, window, confidence in zip(items, windows, confidences, strict=True):
            item.confidences.append(confidence)
            if item.on_window is not None:
                try:
                    item.on_window(window, confidence)
                except Exception as exc:
                    _fail(item, exc)
                    continue
            if not item.pending and not item.future.done():
                item.future.set_result(item.confidences)

    def _requeue(self, sample_rate: int, item: _Queued) -> None:
        self._queued.setdefault(sample_rate, []).append(item)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_soon(self._flush)


def _fail(item: _Queued, exc: Exception) -> None:
    item.failed = True
    if not item.future.done():
        item.future.set_exception(exc)


_batchers: PerLoop[SileroBatcher] = PerLoop(SileroBatcher)


def shared_batcher() -> SileroBatcher:
    """The running event loop's batcher (created on first use), over the process's session."""
    return _batchers.get()
