"""A turn starts at a short word when the bot is quiet; over the bot, only at longer speech.

One VAD start time cannot serve both moments. Between turns it should be short: a one-word
answer ("Oui.", "Sí." from espeak-ng on a phone line) holds Silero's confidence for about
Pipecat's 0.2 s, so at 0.2 s the VAD reports it or not by the phase of its windows and the
caller may never be answered (0.1 s hears all 78 short words of ``bench/vad_sensitivity.py``,
73 at 0.2 s, with no more false starts on noise or breathing). While the bot speaks, a start
interrupts it, so there it keeps Pipecat's 0.2 s: a shorter start would let shorter sounds over
the answer cut the bot off.

This strategy starts the turn at the VAD's start, as Pipecat's
:class:`~pipecat.turns.user_start.VADUserTurnStartStrategy` does, and sets the VAD's start
time by the bot's state, the Pipecat way: a ``VADParamsUpdateFrame`` pushed upstream to the
VAD (a ``VADProcessor`` or a transport that hosts it), which then counts that much speech
before it reports any. Setting the VAD itself, not a timer here, keeps the rule "this much
speech, unbroken" exact on a busy machine: a timer would still run on after the speech had
ended, since the VAD reports the end only ``stop_secs`` later. The change often comes while the
caller speaks (a barge-in stops the bot mid-sentence): it needs a VAD analyzer that keeps the
caller's speech across new params (:class:`~agent.fastpath.shared_silero.SharedSileroVADAnalyzer`
does; Pipecat's own starts over from quiet and reports a stop at the next quiet window).
"""

from __future__ import annotations

from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    Frame,
    VADParamsUpdateFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.turns.types import ProcessFrameResult
from pipecat.turns.user_start import VADUserTurnStartStrategy


class BargeInUserTurnStartStrategy(VADUserTurnStartStrategy):
    """Pipecat's VAD turn start, with the VAD's start time longer while the bot speaks."""

    def __init__(self, *, vad_params: VADParams, barge_in_secs: float, **kwargs: object) -> None:
        """Create the strategy.

        Args:
            vad_params: The caller's VAD settings as built (``start_secs``: the speech a turn
                needs while the bot is quiet).
            barge_in_secs: The unbroken speech the VAD must hear while the bot speaks before
                it reports a start, and so interrupts the bot.
        """
        if barge_in_secs <= 0:
            raise ValueError(f"barge_in_secs ({barge_in_secs}) must be positive")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._quiet_params = vad_params
        self._speaking_params = vad_params.model_copy(update={"start_secs": barge_in_secs})
        self._bot_speaking = False

    async def process_frame(self, frame: Frame) -> ProcessFrameResult:
        if isinstance(frame, BotStartedSpeakingFrame) and not self._bot_speaking:
            self._bot_speaking = True
            await self._use(self._speaking_params)
        elif isinstance(frame, BotStoppedSpeakingFrame) and self._bot_speaking:
            self._bot_speaking = False
            await self._use(self._quiet_params)
        return await super().process_frame(frame)

    async def _use(self, params: VADParams) -> None:
        if self._quiet_params.start_secs != self._speaking_params.start_secs:
            await self.push_frame(VADParamsUpdateFrame(params=params), FrameDirection.UPSTREAM)
