"""Pipecat's stock way to take a Twilio media stream, for the benches' baselines.

Wait for the stream's ``start``, then Pipecat's own ``TwilioFrameSerializer`` (20 ms frames,
no batching) in Pipecat's ``FastAPIWebsocketTransport``: what a Pipecat user writes from its
Twilio example, so the baselines pay what a stock bot pays.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import WebSocket
    from pipecat.transports.websocket.fastapi import FastAPIWebsocketTransport


async def stock_twilio_transport(websocket: WebSocket) -> FastAPIWebsocketTransport:
    """Accept ``websocket`` and read up to Twilio's ``start``; the call's stock transport."""
    from pipecat.serializers.twilio import TwilioFrameSerializer
    from pipecat.transports.websocket.fastapi import (
        FastAPIWebsocketParams,
        FastAPIWebsocketTransport,
    )

    await websocket.accept()
    while True:
        message = json.loads(await websocket.receive_text())
        if message.get("event") == "start":
            break
    start = message["start"]
    serializer = TwilioFrameSerializer(
        start["streamSid"],
        start["callSid"],
        params=TwilioFrameSerializer.InputParams(auto_hang_up=False),
    )
    return FastAPIWebsocketTransport(
        websocket=websocket,
        params=FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            add_wav_header=False,
            serializer=serializer,
        ),
    )
