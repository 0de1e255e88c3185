"""``SharedSmartTurnAnalyzer``: Pipecat's Smart Turn v3, with one model for the whole process.

A drop-in for ``LocalSmartTurnAnalyzerV3`` (Pipecat's ``BaseTurnAnalyzer`` interface: a turn
stop strategy appends the caller's audio and asks for a verdict at a pause) that gives the same
probability on the same audio, but whose per-call instance holds only the call's audio window
(at most ``max_duration_secs`` of PCM16: 128 kB on a phone call) and sends its verdicts to the
event loop's :class:`~agent.turns.smart_turn_batcher.SmartTurnBatcher`: one ONNX session and
one thread for every call, instead of a session (~48 MB) and a thread per call.

What it mirrors (Pipecat 1.14.0):

- ``BaseSmartTurn.append_audio``: speech starts the turn and resets the silence count;
  ``stop_secs`` of silence after speech is a COMPLETE verdict without the model (and clears);
  before speech, audio older than ``pre_speech_ms + stop_secs + max_duration_secs`` is dropped.
- ``BaseSmartTurn._process_speech_segment``: the segment runs from ``pre_speech_ms`` plus the
  VAD's start delay before the first speech to the latest audio, at most
  ``max_duration_secs`` of it; an empty one is INCOMPLETE without the model.
- ``LocalSmartTurnAnalyzerV3._predict_endpoint``: resampled to 16 kHz (soxr, HQ), the last 8 s
  kept or zeros put in front, Whisper log-mel features (Pipecat's own function), probability
  > 0.5 is COMPLETE.
- ``BaseSmartTurn.analyze_end_of_turn``: a COMPLETE verdict clears the audio, unless
  ``clear_on_complete=False``: the adaptive strategy (:mod:`agent.turns.adaptive_stop`) may not
  end the turn on a COMPLETE verdict ("um..." is not a question), and a cleared buffer would
  then judge "what was it?" alone, a plain question, where the whole "um... what was it?" sounds
  like someone still thinking; it calls :meth:`clear` when the turn really ends.

Two deliberate differences: audio is timed by the audio itself (samples heard / rate), not by
the wall clock at which each frame was appended, which is the same at real-time pace and right
when a busy server reads frames in bursts; and audio older than the longest segment the model
can be given is dropped during speech too (Pipecat keeps it until the turn ends), which cannot
change a segment (``tests/agent/fastpath/test_shared_smart_turn.py`` shows both give the same
probabilities, batched across calls, at 8 and 16 kHz). A failed verdict is logged and reads
INCOMPLETE (the strategy then waits its upper bound), where Pipecat's raises into the strategy.

Reads Pipecat's private ``_whisper_features.compute_whisper_log_mel_features``, so the features
are Pipecat's to the bit.
"""

from __future__ import annotations

import time
from collections import deque
from functools import partial

import numpy as np
import soxr
from loguru import logger
from pipecat.audio.turn.base_turn_analyzer import BaseTurnAnalyzer, EndOfTurnState
from pipecat.audio.turn.smart_turn._whisper_features import compute_whisper_log_mel_features
from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.metrics.metrics import MetricsData, TurnMetricsData

from agent.turns.smart_turn_batcher import MODEL_SAMPLE_RATE, SmartTurnBatcher, shared_batcher

MODEL_WINDOW_S = 8
"""Seconds of audio the model hears (``_predict_endpoint``'s ``n_seconds``)."""


def smart_turn_features(segment: np.ndarray, sample_rate: int) -> np.ndarray:
    """The model's input for one segment of PCM16 at ``sample_rate``, as Pipecat computes it."""
    audio = segment.astype(np.float32) / 32768.0
    if sample_rate != MODEL_SAMPLE_RATE:
        audio = soxr.resample(audio, sample_rate, MODEL_SAMPLE_RATE, quality="HQ")
    window = MODEL_WINDOW_S * MODEL_SAMPLE_RATE
    if len(audio) > window:
        audio = audio[-window:]
    elif len(audio) < window:
        audio = np.pad(audio, (window - len(audio), 0), mode="constant", constant_values=0)
    features: np.ndarray = compute_whisper_log_mel_features(audio, do_normalize=True)
    return features


class SharedSmartTurnAnalyzer(BaseTurnAnalyzer):
    """Smart Turn v3 for one call, its verdicts batched with every other call's.

    Args:
        sample_rate: the audio's rate; None to take the pipeline's input rate.
        params: as for Pipecat's analyzer (``stop_secs``, ``pre_speech_ms``,
            ``max_duration_secs``).
        clear_on_complete: forget the turn's audio after a COMPLETE verdict, as Pipecat does;
            False keeps it until :meth:`clear` (see the module docstring).
        batcher: the batcher to use; default: the running event loop's shared one.
    """

    def __init__(
        self,
        *,
        sample_rate: int | None = None,
        params: SmartTurnParams | None = None,
        clear_on_complete: bool = True,
        batcher: SmartTurnBatcher | None = None,
    ) -> None:
        super().__init__(sample_rate=sample_rate)
        self._params = params or SmartTurnParams()
        self._clear_on_complete = clear_on_complete
        self._batcher = batcher
        self._chunks: deque[tuple[float, np.ndarray]] = deque()  # (audio time at its end, PCM)
        self._kept = 0  # samples in _chunks
        self._heard = 0  # samples ever appended: the audio clock
        self._speech_triggered = False
        self._speech_start = 0.0
        self._silence_ms = 0.0
        self._vad_start_secs = 0.0

    @property
    def speech_triggered(self) -> bool:
        return self._speech_triggered

    @property
    def params(self) -> SmartTurnParams:
        return self._params

    @property
    def state_nbytes(self) -> int:
        """Bytes of audio this call holds (the model itself is shared)."""
        return self._kept * 2

    def set_sample_rate(self, sample_rate: int) -> None:
        super().set_sample_rate(sample_rate)
        if self._sample_rate <= 0:
            raise ValueError(f"Smart Turn needs a positive sample rate, not {self._sample_rate}")

    def update_vad_start_secs(self, vad_start_secs: float) -> None:
        self._vad_start_secs = vad_start_secs

    def append_audio(self, buffer: bytes, is_speech: bool) -> EndOfTurnState:
        """Add caller audio (PCM16 at the sample rate); COMPLETE only after ``stop_secs`` of
        silence following speech, as Pipecat's. Audio that comes before the sample rate is
        set (before the pipeline started) is not part of any turn and is ignored."""
        if self._sample_rate <= 0:
            return EndOfTurnState.INCOMPLETE  # audio before the pipeline started: not a turn
        audio = np.frombuffer(buffer, dtype=np.int16)
        self._heard += audio.size
        now = self._heard / self._sample_rate
        self._chunks.append((now, audio))
        self._kept += audio.size
        state = EndOfTurnState.INCOMPLETE
        if is_speech:
            self._silence_ms = 0.0
            self._speech_triggered = True
            if self._speech_start == 0:
                self._speech_start = now
        elif self._speech_triggered:
            self._silence_ms += audio.size / (self._sample_rate / 1000)
            if self._silence_ms >= self._params.stop_secs * 1000:
                logger.debug(f"End of Turn complete due to stop_secs ({self._silence_ms:.0f} ms)")
                state = EndOfTurnState.COMPLETE
                self._clear(state)
        else:
            params = self._params
            oldest = now - (
                params.pre_speech_ms / 1000 + params.stop_secs + params.max_duration_secs
            )
            while self._chunks and self._chunks[0][0] < oldest:
                self._drop_oldest()
        longest = int(self._params.max_duration_secs * self._sample_rate)
        while len(self._chunks) > 1 and self._kept - self._chunks[0][1].size >= longest:
            self._drop_oldest()  # never part of a segment (see the module docstring)
        return state

    async def analyze_end_of_turn(self) -> tuple[EndOfTurnState, MetricsData | None]:
        """The model's verdict on the turn so far (batched with other calls' verdicts)."""
        segment = self._segment()
        if segment is None:
            return EndOfTurnState.INCOMPLETE, None
        batcher = self._batcher or shared_batcher()
        started = time.perf_counter()
        try:
            probability = await batcher.probability(
                partial(smart_turn_features, segment, self._sample_rate)
            )
        except Exception as exc:
            logger.error(f"Smart Turn could not judge the pause ({exc}); reading it INCOMPLETE")
            return EndOfTurnState.INCOMPLETE, None
        complete = probability > 0.5
        state = EndOfTurnState.COMPLETE if complete else EndOfTurnState.INCOMPLETE
        metrics = TurnMetricsData(
            processor=type(self).__name__,
            is_complete=complete,
            probability=probability,
            e2e_processing_time_ms=(time.perf_counter() - started) * 1000,
        )
        if complete and self._clear_on_complete:
            self._clear(state)
        logger.debug(f"End of Turn result: {state}")
        return state, metrics

    def clear(self) -> None:
        self._clear(EndOfTurnState.COMPLETE)

    def _clear(self, state: EndOfTurnState) -> None:
        self._speech_triggered = state == EndOfTurnState.INCOMPLETE
        self._chunks.clear()
        self._kept = 0
        self._speech_start = 0.0
        self._silence_ms = 0.0

    def _drop_oldest(self) -> None:
        self._kept -= self._chunks.popleft()[1].size

    def _segment(self) -> np.ndarray | None:
        """The audio the model judges (a copy), or None when there is none."""
        if not self._chunks:
            return None
        pre_speech_s = self._params.pre_speech_ms / 1000 + self._vad_start_secs
        start = self._speech_start - pre_speech_s
        first = next((i for i, (t, _) in enumerate(self._chunks) if t >= start), 0)
        chunks = [pcm for _, pcm in list(self._chunks)[first:]]
        segment = np.concatenate(chunks)
        longest = int(self._params.max_duration_secs * self._sample_rate)
        if len(segment) > longest:
            segment = segment[-longest:]
        return segment if len(segment) else None
