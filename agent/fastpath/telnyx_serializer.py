"""Telnyx's media-stream serializer, batching caller audio into longer pipeline frames.

Mirrors the ``media`` branch of ``pipecat.serializers.telnyx.TelnyxFrameSerializer.deserialize``
(Pipecat 1.14.0): the same G.711 decoding (μ-law for PCMU, A-law for PCMA) through the
serializer's own resampler state (``_telnyx_sample_rate``, ``_sample_rate``,
``_input_resampler``), but three 20 ms messages make one pipeline frame, as
:class:`~agent.fastpath.twilio_serializer.BatchingTwilioSerializer` does for Twilio and for the
same reason (per-frame cost). Pipecat's ``serialize`` is kept as it is: bot audio goes out as
``{"event": "media", "media": {"payload": …}}`` in the codec the TeXML asked for, and an
interruption as ``{"event": "clear"}``.

It never raises: Pipecat's serializer raises on an unknown encoding and on a payload that is
not base64, and its transport then ends the call; here a malformed message is reported and
ignored. It also reports Telnyx's ``stop``. It makes no REST call (``auto_hang_up`` off): the
call ends when Telnyx closes the stream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pipecat.audio.utils import alaw_to_pcm, ulaw_to_pcm
from pipecat.frames.frames import Frame
from pipecat.serializers.telnyx import TelnyxFrameSerializer

from agent.fastpath.media_stream_reader import MediaStreamReader, RealTimeBudget

G711 = Literal["PCMU", "PCMA"]


class BatchingTelnyxSerializer(TelnyxFrameSerializer):
    """Telnyx's serializer that hands caller audio on in ``frame_ms`` frames, reports ``stop``
    to ``on_stop`` and every malformed message to ``on_bad_message(why, sample)``.

    ``caller_encoding``: what the ``start`` message's ``media_format`` says the caller's audio
    is; ``bot_encoding``: what Telnyx plays back (the TeXML's ``bidirectionalCodec``).
    """

    def __init__(
        self,
        stream_id: str,
        *,
        caller_encoding: G711,
        bot_encoding: G711,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
        frame_ms: int,
        budget: RealTimeBudget | None = None,
    ) -> None:
        # Pipecat names the directions from Telnyx's side: its "outbound" is what Telnyx
        # sends us (the caller), its "inbound" what we send Telnyx (the bot).
        super().__init__(
            stream_id,
            outbound_encoding=caller_encoding,
            inbound_encoding=bot_encoding,
            params=TelnyxFrameSerializer.InputParams(auto_hang_up=False),
        )
        self._reader = MediaStreamReader(
            decode=ulaw_to_pcm if caller_encoding == "PCMU" else alaw_to_pcm,
            carrier_rate=self._telnyx_sample_rate,
            frame_ms=frame_ms,
            on_stop=on_stop,
            on_bad_message=on_bad_message,
            on_other_event=self._other_event,
            budget=budget,
        )
        self._on_bad_message = on_bad_message

    async def deserialize(self, data: str | bytes) -> Frame | None:
        return await self._reader.read(
            data, sample_rate=self._sample_rate, resampler=self._input_resampler
        )

    def _other_event(self, event: str, data: str) -> None:
        if event == "error":
            self._on_bad_message("Telnyx reported a stream error", data[:200])
