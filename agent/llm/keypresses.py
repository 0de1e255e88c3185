"""The caller's keypresses, as words the model can act on: "The caller pressed 1."

Pipecat's :class:`DTMFAggregator` collects ``InputDTMFFrame`` digits until ``timeout_s`` of
quiet or ``#`` and pushes the sequence as one final ``TranscriptionFrame``, so a keypress
makes a user turn like speech does; its first digit interrupts the bot like speech does too.
This subclass only words the sentence: with its prefix Pipecat writes ``"The caller pressed
12"``, and the full stop added here makes it a sentence a model reads without being told a
convention (and one the transcript-aware end of turn does not take for a number still being
read out).
"""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import Frame, TranscriptionFrame
from pipecat.processors.aggregators.dtmf_aggregator import DTMFAggregator
from pipecat.processors.frame_processor import FrameDirection

PREFIX = "The caller pressed "


class KeypressAggregator(DTMFAggregator):
    """One "The caller pressed …." transcript per keypress sequence."""

    def __init__(self, *, timeout_s: float, **kwargs: Any) -> None:
        super().__init__(timeout=timeout_s, prefix=PREFIX, **kwargs)

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        if (
            isinstance(frame, TranscriptionFrame)
            and frame.text.startswith(PREFIX)
            and not frame.text.endswith(".")
        ):
            frame.text += "."
        await super().push_frame(frame, direction)
