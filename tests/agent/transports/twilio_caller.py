"""The Twilio side of a Media Streams WebSocket, for tests: ``connected``, ``start``, 20 ms
8 kHz μ-law ``media`` at real-time pace, and a record of what the server sends back."""

from __future__ import annotations

import asyncio
import audioop
import base64
import json
from typing import Any

import websockets

from agent.transports.telephony import stream_token
from tests.speech import speech_at

TOKEN = "twilio-test-token"
FRAME_BYTES = 160  # 20 ms of 8 kHz μ-law


class TwilioCaller:
    """The Twilio side of a Media Streams WebSocket."""

    def __init__(self, ws: websockets.ClientConnection, call_sid: str = "CA0001") -> None:
        self.ws = ws
        self.call_sid = call_sid
        self.events: list[dict[str, Any]] = []
        self.media_at_clear: list[int] = []
        self.closed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                event = json.loads(message)
                if event.get("event") == "clear":
                    self.media_at_clear.append(self.count("media"))
                self.events.append(event)
        except websockets.ConnectionClosed:
            pass
        finally:
            self.closed.set()

    def count(self, event: str) -> int:
        return sum(1 for e in self.events if e.get("event") == event)

    async def start(self, token: str | None = None) -> None:
        await self.ws.send(
            json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        )
        custom = {"token": token if token is not None else stream_token(self.call_sid, TOKEN)}
        await self.ws.send(
            json.dumps(
                {
                    "event": "start",
                    "sequenceNumber": "1",
                    "streamSid": "MZ0001",
                    "start": {
                        "streamSid": "MZ0001",
                        "accountSid": "AC0001",
                        "callSid": self.call_sid,
                        "tracks": ["inbound"],
                        "mediaFormat": {
                            "encoding": "audio/x-mulaw",
                            "sampleRate": 8000,
                            "channels": 1,
                        },
                        "customParameters": custom,
                    },
                }
            )
        )

    async def stop(self) -> None:
        """Twilio's ``stop``: the call is over."""
        await self.ws.send(
            json.dumps({"event": "stop", "streamSid": "MZ0001", "stop": {"callSid": self.call_sid}})
        )

    async def speak(self, ulaw: bytes, *, stop_after: float | None = None) -> None:
        """Send μ-law audio in 20 ms media messages at real-time pace."""
        loop = asyncio.get_running_loop()
        begin = loop.time()
        for i in range(0, len(ulaw), FRAME_BYTES):
            if stop_after is not None and i / 8000 >= stop_after:
                return
            payload = base64.b64encode(ulaw[i : i + FRAME_BYTES].ljust(FRAME_BYTES, b"\xff"))
            await self.ws.send(
                json.dumps(
                    {
                        "event": "media",
                        "streamSid": "MZ0001",
                        "media": {"payload": payload.decode()},
                    }
                )
            )
            await asyncio.sleep(max(0.0, begin + (i + FRAME_BYTES) / 8000 - loop.time()))

    async def silence(self, seconds: float) -> None:
        await self.speak(b"\xff" * int(8000 * seconds))


def ulaw_speech(text: str) -> bytes:
    return audioop.lin2ulaw(speech_at(text, 8000), 2)
