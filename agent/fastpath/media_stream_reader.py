"""The carrier-neutral half of a media-stream serializer's ``deserialize``.

Twilio and Telnyx send the same kind of JSON messages on their media-stream WebSockets:
``media`` with base64 G.711 in ``media.payload``, ``dtmf`` with ``dtmf.digit``, ``stop``.
:class:`MediaStreamReader` reads them for
:class:`~agent.fastpath.twilio_serializer.BatchingTwilioSerializer` and
:class:`~agent.fastpath.telnyx_serializer.BatchingTelnyxSerializer`: it batches three 20 ms
messages into one pipeline frame (per-frame cost, see ``bench/capacity.py``), drops audio that
runs ahead of real time, and never raises. Pipecat's serializers raise on a malformed message
and their transport then ends the call; here the message is reported to
``on_bad_message(why, sample)`` and ignored.

Decoding goes through the Pipecat serializer's own resampler state, handed in on each read, as
the ``media`` branch of Pipecat 1.14.0's ``deserialize`` does.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from pipecat.audio.dtmf.types import KeypadEntry
from pipecat.audio.resamplers.base_audio_resampler import BaseAudioResampler
from pipecat.frames.frames import Frame, InputAudioRawFrame, InputDTMFFrame

G711Decoder = Callable[[bytes, int, int, BaseAudioResampler], Awaitable[bytes]]
"""``pipecat.audio.utils.ulaw_to_pcm`` or ``alaw_to_pcm``."""

MAX_MESSAGE_CHARS = 64 * 1024
"""Longer than any carrier's message (a 20 ms media message is ~300 characters)."""


class RealTimeBudget:
    """How much caller audio may have arrived by now: real time since the first byte, plus a
    burst allowance. A caller that sends faster (nothing else holds clients to real time) gets
    the excess dropped, so one call cannot take the CPU and the STT from others."""

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


class MediaStreamReader:
    """Reads one media stream's messages into pipeline frames.

    Args:
        decode: The G.711 flavour of the caller's audio.
        carrier_rate: The stream's sample rate (8 kHz); one byte per sample.
        frame_ms: Caller audio goes down the pipeline in frames this long.
        on_stop: Called when the carrier says the stream stopped.
        on_bad_message: Called with why and a sample of each malformed message.
        on_other_event: Called with the event name and the message for any other event
            (``connected``, ``start``, ``mark``, a carrier's own, newer ones).
        budget: Caller audio beyond real time plus a burst is dropped and reported.
    """

    def __init__(
        self,
        *,
        decode: G711Decoder,
        carrier_rate: int,
        frame_ms: int,
        on_stop: Callable[[], None],
        on_bad_message: Callable[[str, str], None],
        on_other_event: Callable[[str, str], None] | None = None,
        budget: RealTimeBudget | None = None,
    ) -> None:
        self._decode = decode
        self._carrier_rate = carrier_rate
        self._frame_bytes = carrier_rate * frame_ms // 1000
        self._on_stop = on_stop
        self._on_bad_message = on_bad_message
        self._on_other_event = on_other_event
        self._budget = budget
        self._pending = bytearray()  # G.711 not yet handed to the pipeline

    async def read(
        self, data: str | bytes, *, sample_rate: int, resampler: BaseAudioResampler
    ) -> Frame | None:
        """The frame ``data`` completes, if any; ``sample_rate`` is the pipeline's."""
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
            return await self._media(message, data, sample_rate, resampler)
        if event == "dtmf":
            return self._dtmf(message, data)
        if event == "stop":
            self._on_stop()
        elif self._on_other_event is not None:
            self._on_other_event(str(event), data)
        return None

    async def _media(
        self, message: dict[str, Any], data: str, sample_rate: int, resampler: BaseAudioResampler
    ) -> Frame | None:
        media = message.get("media")
        if isinstance(media, dict) and media.get("track", "inbound") != "inbound":
            return None  # the bot's own audio, when the stream was asked for both tracks
        payload = media.get("payload") if isinstance(media, dict) else None
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
        pcm = await self._decode(frame, self._carrier_rate, sample_rate, resampler)
        if not pcm:
            return None
        return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=sample_rate)

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
