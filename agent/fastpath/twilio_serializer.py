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

import base64
import json
import time
from collections.abc import Callable
from typing import Any

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.audio.utils import ulaw_to_pcm
from pipecat.frames.frames import Frame, InputAudioRawFrame, InputDTMFFrame
from pipecat.serializers.twilio import TwilioFrameSerializer


class RealTimeBudget:
    """How much caller audio may have arrived by now: real time since the first byte, plus a
    burst allowance. A caller that sends faster (nothing else holds Twilio clients to real
    time) gets the excess dropped, so one call cannot take the CPU and the STT from others."""

    def __init__(
        self, bytes_per_second: int, *, burst_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate = bytes_per_second
        self._burst = burst_s * bytes_per_second
        self._clock = clock
        self._started: float | None = None
        self._admitted = 0

    def admit(self, size: int) -> bool:
        now = self._clock()
        if self._started is None:
            self._started = now
        allowed = (now - self._started) * self._rate + self._burst
        if self._admitted + size > allowed:
            return False
        self._admitted += size
        return True


MAX_MESSAGE_CHARS = 64 * 1024
"""Longer than any Twilio message (a 20 ms media message is ~300 characters)."""


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
        self._on_stop = on_stop
        self._on_bad_message = on_bad_message
        self._pending = bytearray()  # μ-law not yet handed to the pipeline
        self._frame_bytes = self._twilio_sample_rate * frame_ms // 1000  # 1 byte per sample
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
        return None  # connected, start, mark, and events newer than this code

    async def _media(self, message: dict[str, Any], data: str) -> Frame | None:
        media = message.get("media")
        payload = media.get("payload") if isinstance(media, dict) else None
        if not isinstance(payload, str):
            self._bad("a media message without a text payload", data)
            return None
        try:
            ulaw = base64.b64decode(payload, validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            self._bad("a media payload that is not base64", data)
            return None
        if self._budget is not None and not self._budget.admit(len(ulaw)):
            self._bad("audio faster than real time (dropped)", data)
            return None
        self._pending += ulaw
        if len(self._pending) < self._frame_bytes:
            return None
        frame = bytes(self._pending)
        self._pending.clear()
        pcm = await ulaw_to_pcm(
            frame, self._twilio_sample_rate, self._sample_rate, self._input_resampler
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
