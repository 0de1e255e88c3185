"""VAD decisions for one audio track, with no pipeline around them.

A listen-only analytics track needs only three things from a VAD: where each stretch of
speech starts and stops, and the speech's audio (with the pre-roll in front of it) for the
STT. Pipecat 1.14 gets these by running ``VADProcessor`` as a pipeline stage, so every 60 ms
frame of every track crossed the VAD's queue and task, and then the STT service's, even in
silence, where the service only keeps it as pre-roll. On a server holding a hundred calls
of two tracks that per-frame machinery was most of the CPU (``bench/analytics.py``).

:class:`SpeechGate` makes the ``VADController``'s decisions inline, in the task that read the
audio: the same analyzer (the shared batched Silero), the same rule for when a state change
is an event (a change to SPEAKING or QUIET; STARTING and STOPPING are not), and the same forced
stop when no audio comes for ``audio_idle_timeout`` while speaking. It also counts the audio,
to say where in the track each stretch started and stopped (the VAD's confirmation wait taken
off, as :class:`~agent.stt.client.RealtimeTranscriber`'s speech clock does). Silence never
leaves it; its caller sends speech, and the pre-roll it keeps, to the STT.

Mirrors ``pipecat.audio.vad.vad_controller.VADController`` (``_handle_audio``, ``_handle_vad``,
``_audio_idle_handler``; Pipecat 1.14.0). Equivalence: ``tests/agent/fastpath/
test_speech_gate.py``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADState

from agent.stt.turn import PreRoll


@dataclass(frozen=True, slots=True)
class SpeechEdge:
    """Speech started or stopped, ``audio_s`` seconds into the track."""

    kind: Literal["started", "stopped"]
    audio_s: float


class SpeechGate:
    """One track's VAD: audio in, speech edges out, the pre-roll kept between stretches.

    Args:
        analyzer: The track's own analyzer (its state is this track's).
        sample_rate: The track's PCM16 rate (8000 or 16000 for Silero).
        preroll_s: How much audio before a start to keep for the STT (its pre-roll).
        audio_idle_timeout: No audio for this long while speaking forces a stop (as
            ``VADController``); 0 disables it.
    """

    def __init__(
        self,
        analyzer: VADAnalyzer,
        *,
        sample_rate: int,
        preroll_s: float,
        audio_idle_timeout: float = 1.0,
    ) -> None:
        analyzer.set_sample_rate(sample_rate)
        self.analyzer = analyzer
        self.sample_rate = sample_rate
        self.audio_idle_timeout = audio_idle_timeout
        self._state = VADState.QUIET  # the controller's state, not the analyzer's
        self._samples = 0
        self._preroll = PreRoll(preroll_s)
        self.last_audio_at = time.monotonic()

    @property
    def speaking(self) -> bool:
        return self._state == VADState.SPEAKING

    @property
    def audio_s(self) -> float:
        """Seconds of audio heard so far."""
        return self._samples / self.sample_rate

    async def hear(self, pcm: bytes) -> SpeechEdge | None:
        """Count and analyse one frame; the edge it caused, if any.

        While not speaking, the frame joins the pre-roll (take it with :meth:`take_preroll`
        when speech starts).
        """
        self.last_audio_at = time.monotonic()
        self._samples += len(pcm) // 2
        if self._state != VADState.SPEAKING:
            self._preroll.hear(pcm, self.sample_rate)
        new = await self.analyzer.analyze_audio(pcm)
        if new == self._state or new in (VADState.STARTING, VADState.STOPPING):
            return None
        self._state = new
        if new == VADState.SPEAKING:
            return SpeechEdge("started", max(0.0, self.audio_s - self.analyzer.params.start_secs))
        return SpeechEdge("stopped", max(0.0, self.audio_s - self.analyzer.params.stop_secs))

    def take_preroll(self) -> bytes:
        """The audio kept before this start (the newest ``preroll_s``), and forget it."""
        return self._preroll.take()

    def idle_stop(self, now: float | None = None) -> SpeechEdge | None:
        """The forced stop of a track whose audio stopped coming while speaking (``None``:
        not speaking, or audio came within ``audio_idle_timeout``)."""
        now = time.monotonic() if now is None else now
        if (
            self._state != VADState.SPEAKING
            or self.audio_idle_timeout <= 0
            or now - self.last_audio_at < self.audio_idle_timeout
        ):
            return None
        self._state = VADState.QUIET
        return SpeechEdge("stopped", max(0.0, self.audio_s - self.analyzer.params.stop_secs))

    def end(self) -> SpeechEdge | None:
        """The stream is over: a stretch still open stops at the end of the audio."""
        if self._state != VADState.SPEAKING:
            return None
        self._state = VADState.QUIET
        return SpeechEdge("stopped", self.audio_s)
