"""The stage that carries one party's translations into the other party's call.

It sits in each party's pipeline (:mod:`pipelines.interpreter`) between the
:class:`~agent.llm.translation.TranslationProcessor` and the TTS::

    … STT → TranslationProcessor → PeerRelay → TTS → transport.output()
                                      │  ▲
           the translation to speak,  │  │  the other party's translation, queued into
           and a copy of each caption ▼  │  this worker by its PeerRelay
                                 the other party's worker

The way across is Pipecat's own: ``PipelineWorker.queue_frames`` on the other party's worker
(what one task uses to inject frames into another). Queued frames enter that pipeline at its
source and travel down to its relay, marked as coming from the peer
(``frame.metadata[FROM_PEER]``), which lets them on to its TTS; everything else this party's
translator says to speak goes across instead of into this call. Captions (``translation``
server messages, each with the ``party`` whose words it translates) are shown on both sides.
"""

from __future__ import annotations

from typing import Any

from pipecat.frames.frames import (
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame

from agent.interpreter.sessions import FROM_PEER, Party
from agent.llm.translation import TRANSLATION, TRANSLATION_ERROR

_SPEECH = (LLMFullResponseStartFrame, LLMTextFrame, LLMFullResponseEndFrame)
_CAPTIONS = frozenset({TRANSLATION, TRANSLATION_ERROR})


class PeerRelay(FrameProcessor):
    """Sends this party's translation to the other party; lets the other party's in."""

    def __init__(self, party: Party, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._party = party

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            await self._party.session.arrived(self._party)
            return
        if direction is not FrameDirection.DOWNSTREAM or FROM_PEER in frame.metadata:
            await self.push_frame(frame, direction)
        elif isinstance(frame, _SPEECH):
            await self._party.session.to_peer(self._party, [frame])
        elif isinstance(frame, RTVIServerMessageFrame) and frame.data.get("type") in _CAPTIONS:
            await self.push_frame(frame, direction)
            copy = RTVIServerMessageFrame(data=dict(frame.data))
            await self._party.session.to_peer(self._party, [copy])
        else:
            await self.push_frame(frame, direction)
