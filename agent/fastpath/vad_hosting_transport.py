"""A WebSocket transport whose input runs the call's VAD itself: one queue hop per frame.

Mirrors ``pipecat.transports.base_input.BaseInputTransport.push_audio_frame`` and
``_create_audio_task`` (Pipecat 1.14.0), and the ``_input`` that
``pipecat.transports.websocket.fastapi.FastAPIWebsocketTransport.__init__`` builds: with a VAD
in use, a decoded audio frame goes through the same filter, pause and passthrough checks as
upstream, then straight to :class:`~agent.fastpath.inline_vad.InlineVAD` instead of into the
per-call audio queue and task (which are never created). Without a VAD it is Pipecat's
transport, unchanged.

Equivalence: ``tests/agent/fastpath/test_inline_vad.py`` (same VAD frames at the same audio
frame as ``VADProcessor``).
"""

from __future__ import annotations

from typing import Any

from fastapi import WebSocket
from pipecat.audio.vad.vad_analyzer import VADAnalyzer
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    StartFrame,
    VADParamsUpdateFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessorSetup
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketInputTransport,
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)

from agent.fastpath.inline_vad import InlineVAD


class VADHostingInputTransport(FastAPIWebsocketInputTransport):
    """A WebSocket input transport able to host the call's VAD (:class:`InlineVAD`).

    With a VAD in use, caller audio goes on from the receive task that decoded it, straight
    into the next stage's queue, and is analysed right after; Pipecat's own audio queue and
    task are not created. Without one it behaves exactly as Pipecat's input transport.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._vad: InlineVAD | None = None

    def use_vad(self, analyzer: VADAnalyzer) -> None:
        self._vad = InlineVAD(self, analyzer)

    async def setup(self, setup: FrameProcessorSetup) -> None:  # type: ignore[override]
        await super().setup(setup)
        if self._vad:
            await self._vad.setup(setup)

    async def cleanup(self) -> None:
        await super().cleanup()
        if self._vad:
            await self._vad.cleanup()

    async def start(self, frame: StartFrame) -> None:
        if self._vad:  # before the receive task starts, so the params precede any audio
            await self._vad.start()
        await super().start(frame)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if self._vad is None:
            return
        if isinstance(frame, (EndFrame, CancelFrame)):
            await self._vad.stop()
        elif isinstance(frame, VADParamsUpdateFrame):
            await self._vad.process_frame(frame)

    async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
        if self._vad is None:
            await super().push_audio_frame(frame)
            return
        if not self._params.audio_in_enabled or self._paused:
            return
        if self._params.audio_in_filter:
            frame.audio = await self._params.audio_in_filter.filter(frame.audio)
            if not frame.audio:
                return
        if self._params.audio_in_passthrough:
            await self.push_frame(frame)
        await self._vad.process_frame(frame)

    def _create_audio_task(self) -> None:
        # Pipecat's per-call audio queue and task; push_audio_frame does their job inline.
        if self._vad is None:
            super()._create_audio_task()


class VADHostingWebsocketTransport(FastAPIWebsocketTransport):
    """Pipecat's FastAPI WebSocket transport, with an input that can host the VAD
    (``use_vad``: see :class:`~agent.transports.traits.HostsVAD`)."""

    def __init__(self, websocket: WebSocket, params: FastAPIWebsocketParams) -> None:
        super().__init__(websocket, params)
        self._input = VADHostingInputTransport(
            self, self._client, self._params, name=self._input_name
        )

    def input(self) -> VADHostingInputTransport:
        return self._input  # type: ignore[return-value]  # set in __init__ above
