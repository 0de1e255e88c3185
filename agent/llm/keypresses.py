"""The caller's keypresses, as words the model can act on: "The caller pressed 1."

Pipecat's :class:`DTMFAggregator` collects ``InputDTMFFrame`` digits until ``timeout_s`` of
quiet or ``#`` and pushes the sequence as one final ``TranscriptionFrame``, so a keypress
makes a user turn like speech does; its first digit interrupts the bot like speech does too.
This subclass only words the sentence: Pipecat's ``"DTMF: 12"`` becomes ``"The caller pressed
12."``, a sentence a model reads without being told the convention (and that the transcript-
aware end of turn does not take for a number still being read out).

Mirrors ``DTMFAggregator._flush_aggregation`` (Pipecat 1.14.0), whose private state
(``_aggregation``) it reads.
"""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import TranscriptionFrame
from pipecat.processors.aggregators.dtmf_aggregator import DTMFAggregator
from pipecat.utils.time import time_now_iso8601

PREFIX = "The caller pressed "


class KeypressAggregator(DTMFAggregator):
    """One "The caller pressed …" transcript per keypress sequence."""

    def __init__(self, *, timeout_s: float, **kwargs: Any) -> None:
        super().__init__(timeout=timeout_s, prefix=PREFIX, **kwargs)

    async def _flush_aggregation(self) -> None:
        if not self._aggregation:
            return
        text = f"{PREFIX}{self._aggregation}."
        self._aggregation = ""
        await self.push_frame(
            TranscriptionFrame(text=text, user_id="", timestamp=time_now_iso8601(), finalized=True)
        )
