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

import base64
import json
from collections.abc import Callable
from typing import Any, Literal

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.audio.utils import alaw_to_pcm, ulaw_to_pcm
from pipecat.frames.frames import Frame, InputAudioRawFrame, InputDTMFFrame
from pipecat.serializers.telnyx import TelnyxFrameSerializer

from agent.fastpath.twilio_serializer import MAX_MESSAGE_CHARS, RealTimeBudget

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
        self._decode = ulaw_to_pcm if caller_encoding == "PCMU" else alaw_to_pcm
        self._on_stop = on_stop
        self._on_bad_message = on_bad_message
        self._pending = bytearray()  # G.711 not yet handed to the pipeline
        self._frame_bytes = self._telnyx_sample_rate * frame_ms // 1000  # 1 byte per sample
        self._budget = budget

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if isinstance(data, bytes):
            self._bad("a binary frame", data)
            return None
        if len(data) > MAX_MESSAGE_CHARS:
            self._bad(f"over {MAX_MESSAGE_CHARS} characters", data)
            return None
        try:
            message = json.loads(data)
        except ValueError:
            self._bad("not JSON", data)
            return None
        if not isinstance(message, dict):
            self._bad("not a JSON object", data)
            return None
        event = message.get("event")
        if event == "media":
            return await self._media(message, data)
        if event == "dtmf":
            return self._dtmf(message, data)
        if event == "stop":
            self._on_stop()
        elif event == "error":
            self._bad("Telnyx reported a stream error", data)
        return None  # connected, start, mark, and events newer than this code

    async def _media(self, message: dict[str, Any], data: str) -> Frame | None:
        media = message.get("media")
        if not isinstance(media, dict):
            self._bad("a media message without a media object", data)
            return None
        if media.get("track", "inbound") != "inbound":
            return None  # the bot's own audio, when the stream was asked for both tracks
        payload = media.get("payload")
        if not isinstance(payload, str):
            self._bad("a media message without a text payload", data)
            return None
        try:
            g711 = base64.b64decode(payload, validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            self._bad("a media payload that is not base64", data)
            return None
        if self._budget is not None and not self._budget.admit(len(g711)):
            self._bad("audio faster than real time (dropped)", data)
            return None
        self._pending += g711
        if len(self._pending) < self._frame_bytes:
            return None
        frame = bytes(self._pending)
        self._pending.clear()
        pcm = await self._decode(
            frame, self._telnyx_sample_rate, self._sample_rate, self._input_resampler
        )
        if not pcm:
            return None
        return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)

    def _dtmf(self, message: dict[str, Any], data: str) -> Frame | None:
        dtmf = message.get("dtmf")
        digit = dtmf.get("digit") if isinstance(dtmf, dict) else None
        try:
            return InputDTMFFrame(KeypadEntry(str(digit)))
        except ValueError:
            self._bad("a dtmf message without a keypad digit", data)
            return None

    def _bad(self, why: str, data: str | bytes) -> None:
        sample = data[:200].decode("utf-8", "replace") if isinstance(data, bytes) else data[:200]
        self._on_bad_message(why, sample)
