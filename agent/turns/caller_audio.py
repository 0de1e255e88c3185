"""The caller's audio for the turn logic, taken where the audio is: at the input transport.

The adaptive end of turn listens to the caller's audio (Smart Turn's window, and the quiet it
measures after the VAD stop). Pipecat's way to get it there is to let every caller frame travel
down the pipeline past the STT (``audio_passthrough``), through the keypress and user
aggregators, the LLM, the TTS, the output transport and the assistant aggregator: six more
queue hops and task switches per 20-60 ms frame, for one reader. :class:`CallerAudioFeed` is an
observer instead (called inline: :mod:`agent.fastpath.inline_observers`): it hands each audio
frame the input transport pushes straight to the strategies that read audio, and nothing else
in the pipeline sees caller audio after the STT. The call recorder and RTVI's audio level
observe the input transport's pushes too, so they are unaffected.

Audio reaches a strategy this way a little earlier than the VAD's frames about it (those still
travel the pipeline), where passthrough audio came a little later: the strategy treats both
orders alike (the VAD frames decide, the audio only confirms the quiet).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipecat.frames.frames import InputAudioRawFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.turns.user_stop import BaseUserTurnStopStrategy


class CallerAudioFeed(BaseObserver):
    """Hands the caller's audio frames, as the input transport pushes them, to ``strategies``
    (their ``process_frame``, as the user aggregator would)."""

    def __init__(self, strategies: Sequence[BaseUserTurnStopStrategy]) -> None:
        super().__init__(observe_every_push=False)  # the input transport's push is the first
        self._strategies = tuple(strategies)

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if (
            isinstance(frame, InputAudioRawFrame)
            and isinstance(data.source, BaseInputTransport)
            and data.direction is FrameDirection.DOWNSTREAM
        ):
            for strategy in self._strategies:
                await strategy.process_frame(frame)
