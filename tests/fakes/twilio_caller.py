"""The Twilio side of a Media Streams WebSocket, as Twilio speaks it, for tests and benches.

Twilio's messages (twilio.com/docs/voice/media-streams/websocket-messages): ``connected``;
``start`` with ``streamSid``, ``accountSid``, ``callSid``, ``tracks``, ``mediaFormat``
(``audio/x-mulaw``, 8000 Hz, mono) and ``customParameters``; then one ``media`` message per
20 ms of caller audio (160 bytes of μ-law, base64, with ``track``, ``chunk`` and
``timestamp``), at real-time pace, silence included; ``dtmf`` when the caller presses a key
(``{"event": "dtmf", "streamSid", "sequenceNumber", "dtmf": {"track": "inbound_track",
"digit": "1"}}``); ``mark`` when a mark has played; and ``stop``. Every message after
``connected`` carries a ``sequenceNumber``.

A transfer (the call updated with ``<Dial>`` through the REST API, see
:mod:`tests.fakes.twilio_rest`) ends the stream as Twilio does: :meth:`TwilioCaller.hand_over`
sends ``stop`` and closes the socket (1000), and remembers where the call went.

The caller records what the server sends back: every event (unless ``keep_events=False``,
for load tests), ``media`` counts and bytes, when loud audio arrived and when it was heard
(played in order at real time), and how much media had come when each ``clear`` did. Times
are ``time.monotonic()``.

Pacing: :meth:`TwilioCaller.send` sends one frame every 20 ms. Back-to-back sends continue
one cadence; after a pause the cadence restarts. :meth:`TwilioCaller.pace_from` fixes one
schedule for the whole call instead (a load test's timeline): a late frame then goes at once,
nothing is skipped, and the lateness is kept in ``max_late_s``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import math
import time
import warnings
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
import websockets

from agent.transports.telephony import twilio_stream_tokens
from tests.fakes.speech import speech_at

with warnings.catch_warnings():  # the reference μ-law codec; Python 3.12 still ships it
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

TOKEN = "twilio-test-token"
"""The ``twilio.auth_token`` test servers use; :meth:`TwilioCaller.start` signs with it."""

FRAME_BYTES = 160
"""20 ms of 8 kHz μ-law."""
FRAME_S = 0.02
ULAW_SILENCE = b"\xff"
LOUD_PEAK = 300
"""A media frame whose decoded peak exceeds this (of 32767) counts as loud (bot speech)."""
SPEECH_PEAK = 500
"""Trimmed speech ends at its last sample louder than this."""


def payloads(ulaw: bytes) -> list[str]:
    """The base64 payloads of ``ulaw`` in 20 ms frames, the last padded with silence.

    Encoding is most of a frame's cost: a load test makes these once per sentence."""
    return [
        base64.b64encode(ulaw[i : i + FRAME_BYTES].ljust(FRAME_BYTES, ULAW_SILENCE)).decode()
        for i in range(0, len(ulaw), FRAME_BYTES)
    ]


_MEDIA = (
    '{{"event": "media", "sequenceNumber": "{}", "media": {{"track": "inbound", "chunk": "{}", '
    '"timestamp": "{}", "payload": "{}"}}, "streamSid": "{}"}}'
)
"""A ``media`` message, formatted without ``json.dumps`` (a load test sends thousands a second)."""

SILENCE = payloads(ULAW_SILENCE * FRAME_BYTES)[0]
"""One 20 ms frame of μ-law silence."""


def to_ulaw(pcm: bytes) -> bytes:
    """8 kHz PCM16 as Twilio's μ-law."""
    return audioop.lin2ulaw(pcm, 2)


def from_ulaw(ulaw: bytes) -> np.ndarray:
    """Twilio's μ-law back to 8 kHz PCM16 samples (what a phone line leaves of the audio)."""
    return np.frombuffer(audioop.ulaw2lin(ulaw, 2), np.int16)


def ulaw_speech(text: str, *, voice: str = "espeak", trim: bool = False) -> bytes:
    """``text`` spoken (see :mod:`tests.fakes.speech`) as 8 kHz μ-law.

    ``trim``: from 100 ms before the first word to the last loud sample, so the moment the
    last frame is sent is the end of speech (latency is measured from there).
    """
    pcm = np.frombuffer(speech_at(text, 8000, voice=voice), "<i2")
    if trim:
        loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > SPEECH_PEAK)
        if loud.size:
            pcm = pcm[max(0, int(loud[0]) - 800) : int(loud[-1]) + 1]
    return to_ulaw(pcm.tobytes())


class TwilioCaller:
    """One call's media stream over an open WebSocket; reading starts at once."""

    silence_frame = SILENCE
    """20 ms of silence in the line's codec."""

    def __init__(
        self,
        ws: websockets.ClientConnection,
        call_sid: str = "CA0001",
        *,
        stream_sid: str = "MZ0001",
        account_sid: str = "AC0001",
        keep_events: bool = True,
    ) -> None:
        self.ws = ws
        self.call_sid = call_sid
        self.stream_sid = stream_sid
        self.account_sid = account_sid
        self.events: list[dict[str, Any]] = []
        self.keep_events = keep_events
        self.media_received = 0
        self.media_bytes = 0
        self.media_at_clear: list[int] = []
        self.loud_at: list[float] = []
        self.heard_at: list[float] = []
        """When each loud frame is heard: Twilio plays media in order at real time from its
        arrival, and a server may send ahead of real time (Pipecat's sends an answer's first
        80 ms at once, the rest at twice real time), so a loud frame behind quiet ones is
        heard after it arrives.
        A ``clear`` drops what had not been played."""
        self._playing_until = 0.0
        self.max_late_s = 0.0
        self.audio = bytearray()
        """Every μ-law byte the server sent (when ``keep_events``), e.g. to hear key tones."""
        self.transferred_to: str | None = None
        self.media_bytes_at_hand_over = 0
        self.closed = asyncio.Event()
        self._sequence = 0
        self._chunk = 0
        self._due: float | None = None
        self._fixed = False
        self._reader = asyncio.create_task(self._read())

    # ------------------------------------------------------------------ what Twilio sends

    def stream_token(self) -> str:
        """A fresh stream token for this call, as the signed webhook's TwiML hands one over
        (keyed on :data:`TOKEN`, the account's auth token in tests)."""
        return twilio_stream_tokens(TOKEN).issue(self.call_sid)

    async def start(
        self,
        token: str | None = None,
        *,
        parameters: dict[str, str] | None = None,
        tracks: tuple[str, ...] = ("inbound",),
    ) -> None:
        """``connected`` then ``start``; ``token``: the stream token (default: signed with
        :data:`TOKEN` for this call, as the webhook's TwiML would hand it over);
        ``parameters``: the TwiML's ``<Parameter>``s instead (they carry their own token);
        ``tracks``: ``("inbound", "outbound")`` for a ``track="both_tracks"`` fork."""
        await self.ws.send(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )
        custom = (
            dict(parameters)
            if parameters is not None
            else {"token": token if token is not None else self.stream_token()}
        )
        start = {
            "accountSid": self.account_sid,
            "streamSid": self.stream_sid,
            "callSid": self.call_sid,
            "tracks": list(tracks),
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": custom,
        }
        await self._send_event("start", start=start)

    async def send(
        self, frames: Iterable[str], *, until: float = math.inf, paced: bool = True
    ) -> float | None:
        """Send base64 μ-law frames (:func:`payloads`) one every 20 ms (``paced=False``: as
        fast as the socket takes them, a flooding caller).

        Returns when the last frame went (now, if there were none), or ``None`` if ``until``
        came first.
        """
        now = time.monotonic()
        if self._due is None or (not self._fixed and self._due < now):
            self._due = now
        sent_at = now
        for payload in frames:
            now = time.monotonic()
            if max(now, self._due) >= until:
                return None
            if not paced:
                self._due = now
            elif self._due > now:
                await asyncio.sleep(self._due - now)
            else:
                self.max_late_s = max(self.max_late_s, now - self._due)
            self._due += FRAME_S
            self._chunk += 1
            self._sequence += 1
            await self.ws.send(self._media_message(payload))
            sent_at = time.monotonic()
        return sent_at

    def _to_pcm(self, g711: bytes) -> bytes:
        """The server's audio as PCM16 (a subclass may speak A-law)."""
        return audioop.ulaw2lin(g711, 2)

    def _media_message(self, payload: str) -> str:
        """The ``media`` message for the current chunk (a subclass speaks another carrier)."""
        return _MEDIA.format(
            self._sequence, self._chunk, (self._chunk - 1) * 20, payload, self.stream_sid
        )

    async def speak(self, ulaw: bytes, *, stop_after: float | None = None) -> float:
        """Send μ-law audio at real-time pace (only its first ``stop_after`` seconds, if
        given); returns when its last frame went: the end of speech."""
        frames = payloads(ulaw)
        if stop_after is not None:
            frames = frames[: math.ceil(stop_after / FRAME_S)]
        sent_at = await self.send(frames)
        assert sent_at is not None  # no deadline was given
        return sent_at

    async def silence(self, seconds: float) -> None:
        await self.send([self.silence_frame] * round(seconds / FRAME_S))

    @contextlib.asynccontextmanager
    async def quiet(self) -> AsyncIterator[None]:
        """Send silence while the block runs: Twilio streams the line all call long."""
        sending = asyncio.create_task(self.send(itertools.repeat(self.silence_frame)))
        try:
            yield
        finally:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)

    def pace_from(self, at: float) -> None:
        """Keep one unbroken 20 ms schedule from ``at`` (``time.monotonic()``) for the call."""
        self._due = at
        self._fixed = True

    async def mark(self, name: str) -> None:
        """``mark``: Twilio's word that the audio before the server's mark ``name`` played."""
        await self._send_event("mark", mark={"name": name})

    async def stop(self) -> None:
        """``stop``: the call is over (the caller hung up)."""
        await self._send_event(
            "stop", stop={"accountSid": self.account_sid, "callSid": self.call_sid}
        )

    async def press(self, digits: str) -> None:
        """One ``dtmf`` message per key, as Twilio sends them when the caller presses keys."""
        for digit in digits:
            await self._send_event("dtmf", dtmf={"track": "inbound_track", "digit": digit})

    async def hand_over(self, destination: str) -> None:
        """What Twilio does to the stream when the call is updated with ``<Dial>``: ``stop``,
        then close (1000). The caller is now talking to ``destination``."""
        self.transferred_to = destination
        self.media_bytes_at_hand_over = self.media_bytes
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.stop()
            await self.ws.close(1000)

    async def _send_event(self, event: str, **body: Any) -> None:
        self._sequence += 1
        message = {"event": event, "sequenceNumber": str(self._sequence), **body}
        await self.ws.send(json.dumps({**message, "streamSid": self.stream_sid}))

    # ------------------------------------------------------------------ what comes back

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)

    def first_loud(self, after: float, before: float = math.inf) -> float | None:
        """When the first loud media frame arrived in ``[after, before)``."""
        return next((t for t in self.loud_at if after <= t < before), None)

    def first_heard(self, after: float, before: float = math.inf) -> float | None:
        """When the first loud frame heard in ``[after, before)`` began to play."""
        return next((t for t in self.heard_at if after <= t < before), None)

    async def close(self) -> None:
        """Stop reading (the socket is the opener's to close)."""
        self._reader.cancel()
        await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                event = json.loads(message)
                kind = event.get("event")
                if kind == "media":
                    ulaw = base64.b64decode(event["media"]["payload"])
                    self.media_received += 1
                    self.media_bytes += len(ulaw)
                    now = time.monotonic()
                    plays_at = max(now, self._playing_until)
                    self._playing_until = plays_at + len(ulaw) * FRAME_S / FRAME_BYTES
                    if audioop.max(self._to_pcm(ulaw), 2) > LOUD_PEAK:
                        self.loud_at.append(now)
                        self.heard_at.append(plays_at)
                    if self.keep_events:
                        self.audio += ulaw
                elif kind == "clear":
                    self.media_at_clear.append(self.media_received)
                    now = time.monotonic()
                    self._playing_until = now
                    self.heard_at = [t for t in self.heard_at if t <= now]
                if self.keep_events:
                    self.events.append(event)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()


# ----------------------------------------------------------------------------- key tones

DTMF_ROWS = (697, 770, 852, 941)
DTMF_COLUMNS = (1209, 1336, 1477, 1633)
DTMF_KEYS = ("123A", "456B", "789C", "*0#D")


def heard_keys(ulaw: bytes, *, window_ms: int = 20) -> str:
    """The key tones in 8 kHz μ-law audio, as an IVR's detector hears them (Goertzel per 20 ms
    window: one row and one column tone, each far above the other six), a run of windows
    counting as one press."""
    pcm = np.frombuffer(audioop.ulaw2lin(bytes(ulaw), 2), "<i2").astype(np.float64)
    size = 8000 * window_ms // 1000
    freqs = DTMF_ROWS + DTMF_COLUMNS
    steps = np.arange(size)
    probes = np.array([np.exp(-2j * np.pi * f * steps / 8000) for f in freqs])
    keys: list[str] = []
    previous = ""
    for start in range(0, len(pcm) - size + 1, size):
        window = pcm[start : start + size]
        if np.sqrt(np.mean(window**2)) < 300:
            previous = ""
            continue
        power = np.abs(probes @ window)
        row, column = int(np.argmax(power[:4])), int(np.argmax(power[4:]))
        others = np.delete(power, [row, 4 + column])
        strong = min(power[row], power[4 + column]) > 4 * others.max()
        key = DTMF_KEYS[row][column] if strong else ""
        if key and key != previous:
            keys.append(key)
        previous = key
    return "".join(keys)
