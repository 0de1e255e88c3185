"""Twilio's media-stream serializer, batching caller audio into longer pipeline frames.

Mirrors the ``media`` branch of ``pipecat.serializers.twilio.TwilioFrameSerializer.deserialize``
(Pipecat 1.14.0): the same μ-law decoding through the serializer's own private resampler
state (``_twilio_sample_rate``, ``_sample_rate``, ``_input_resampler``), but three 20 ms
messages make one pipeline frame. Every pipeline frame costs the same queue hops and observer
events whatever its length, so this cut a phone call's CPU by about a third
(``bench/capacity.py``). It also ignores JSON that is not an object, on which Pipecat's
serializer raises and ends the call, and reports Twilio's ``stop``.

Equivalence: ``tests/agent/fastpath/test_twilio_serializer.py`` decodes the same stream with both.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

from loguru import logger
from pipecat.audio.utils import ulaw_to_pcm
from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.serializers.twilio import TwilioFrameSerializer


class BatchingTwilioSerializer(TwilioFrameSerializer):
    """Twilio's serializer, plus a callback when Twilio says the stream stopped, and caller
    audio handed on in ``frame_ms`` frames instead of Twilio's 20 ms ones."""

    def __init__(
        self, stream_sid: str, call_sid: str, *, on_stop: Callable[[], None], frame_ms: int
    ) -> None:
        super().__init__(
            stream_sid,
            call_sid,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        )
        self._on_stop = on_stop
        self._pending = bytearray()  # μ-law not yet handed to the pipeline
        self._frame_bytes = self._twilio_sample_rate * frame_ms // 1000  # 1 byte per sample

    async def deserialize(self, data: str | bytes) -> Frame | None:
        try:
            message = json.loads(data)
        except ValueError:
            return await super().deserialize(data)  # logs what it could not read
        if not isinstance(message, dict):  # valid JSON, but no Twilio message: Pipecat's
            logger.warning(f"ignoring a media-stream message that is not an object: {data!r:.80}")
            return None  # serializer would raise on it and end the call
        event = message.get("event")
        if event == "media":
            payload = (message.get("media") or {}).get("payload")
            if not payload:
                return None
            self._pending += base64.b64decode(payload)
            if len(self._pending) < self._frame_bytes:
                return None
            ulaw = bytes(self._pending)
            self._pending.clear()
            pcm = await ulaw_to_pcm(
                ulaw, self._twilio_sample_rate, self._sample_rate, self._input_resampler
            )
            if not pcm:
                return None
            return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)
        if event == "stop":
            self._on_stop()
            return None
        return await super().deserialize(data)
