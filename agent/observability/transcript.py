"""Each call's words, kept on its :class:`~agent.calls.Call` for the operator API.

What the caller said (final transcripts) and what the bot said (the text it spoke) are kept
for the call's life and for the registry's short history of ended calls, and served by
``GET /calls/{id}`` when ``server.api_token`` is set. They are never logged.
"""

from __future__ import annotations

from pipecat.frames.frames import TranscriptionFrame, TTSTextFrame
from pipecat.observers.base_observer import BaseObserver, FramePushed

from agent.calls import Call


class CallTranscriptObserver(BaseObserver):
    """Appends final user transcripts and spoken bot text to the call.

    Only a frame's first push is recorded, so it asks Pipecat for first pushes only.
    """

    def __init__(self, call: Call) -> None:
        super().__init__(observe_every_push=False)
        self._call = call

    async def on_push_frame(self, data: FramePushed) -> None:
        if not data.first_push:
            return
        frame = data.frame
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._call.user_transcript.append(frame.text.strip())
        elif isinstance(frame, TTSTextFrame) and frame.text.strip():
            self._call.bot_transcript.append(frame.text.strip())
