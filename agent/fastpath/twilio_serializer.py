"""Twilio's media-stream serializer, batching caller audio into longer pipeline frames.

Mirrors the ``media`` branch of ``pipecat.serializers.twilio.TwilioFrameSerializer.deserialize``
(Pipecat 1.14.0): the same μ-law decoding through the serializer's own private resampler
state (``_twilio_sample_rate``, ``_sample_rate``, ``_input_resampler``), but three 20 ms
messages make one pipeline frame. Every pipeline frame costs the same queue hops and observer
events whatever its length, so this cut a phone call's CPU by about a third
(``bench/capacity.py``). It never raises: Pipecat's serializer raises on a malformed payload,
on JSON that is not an object or on a binary frame, and its transport then ends the call; here
such a message is reported and ignored. It also reports Twilio's ``stop``.

Equivalence: ``tests/agent/fastpath/test_twilio_serializer.py`` decodes the same stream with both.
"""

from __future__ import annotations

from collections.abc import Callable

from pipecat.audio.utils import ulaw_to_pcm
from pipecat.frames.frames import Frame
from pipecat.serializers.twilio import TwilioFrameSerializer

from agent.fastpath.media_stream_reader import MediaStreamReader, RealTimeBudget


class BatchingTwilioSerializer(TwilioFrameSerializer):
    """Twilio's serializer, plus a callback when Twilio says the stream stopped, caller audio
    handed on in ``frame_ms`` frames instead of Twilio's 20 ms ones, and a decoder that never
    raises: Pipecat ends the call when ``deserialize`` raises, so a malformed message is
    reported to ``on_bad_message(why, sample)`` and ignored instead."""

    def __init__(
        self,
        stream_sid: str,
        call_sid: str,
        *,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
        frame_ms: int,
        budget: RealTimeBudget | None = None,
    ) -> None:
        super().__init__(
            stream_sid,
            call_sid,
            params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
        )
        self._reader = MediaStreamReader(
            decode=ulaw_to_pcm,
            carrier_rate=self._twilio_sample_rate,
            frame_ms=frame_ms,
            on_stop=on_stop,
            on_bad_message=on_bad_message,
            budget=budget,
        )

    async def deserialize(self, data: str | bytes) -> Frame | None:
        return await self._reader.read(
            data, sample_rate=self._sample_rate, resampler=self._input_resampler
        )
