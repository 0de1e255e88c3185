"""The batching Telnyx serializer decodes the caller's audio as its ``start`` says (PCMU or
PCMA) into ``INPUT_FRAME_MS`` frames with exactly the samples Pipecat's own serializer decodes,
answers in the codec the TeXML asked for, and never raises on what a caller sends."""

from __future__ import annotations

import base64
import json
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InputDTMFFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
)
from pipecat.serializers.telnyx import TelnyxFrameSerializer

from agent.config import load_settings
from agent.fastpath.telnyx_serializer import BatchingTelnyxSerializer
from agent.transports.telephony import INPUT_FRAME_MS, TELEPHONY_SAMPLE_RATE
from agent.transports.telnyx import TelnyxProvider
from tests.fakes.telnyx_caller import PUBLIC_KEY

with warnings.catch_warnings():  # G.711 as Telnyx speaks it; Python 3.12 still ships audioop
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

FRAME_BYTES = TELEPHONY_SAMPLE_RATE * 20 // 1000  # one 20 ms Telnyx media message
ENCODE = {"PCMU": audioop.lin2ulaw, "PCMA": audioop.lin2alaw}
SETUP: Any = SimpleNamespace(audio_in_sample_rate=TELEPHONY_SAMPLE_RATE)


def media(g711: bytes, track: str = "inbound") -> str:
    payload = base64.b64encode(g711).decode()
    return json.dumps(
        {"event": "media", "stream_id": "S1", "media": {"track": track, "payload": payload}}
    )


def start(encoding: str) -> dict[str, Any]:
    return {
        "event": "start",
        "stream_id": "S1",
        "start": {
            "call_control_id": "v3:C1",
            "media_format": {"encoding": encoding, "sample_rate": 8000, "channels": 1},
        },
    }


async def ours(
    encoding: str, *, stops: list[int] | None = None, bad: list[str] | None = None
) -> Any:
    """The serializer the Telnyx provider builds for a call whose ``start`` says ``encoding``."""
    settings = load_settings("default", overrides={"telnyx": {"public_key": PUBLIC_KEY}})
    provider = TelnyxProvider(settings)
    parsed = provider.parse_start(start(encoding))
    assert parsed is not None
    ser = provider.serializer(
        parsed,
        on_stop=lambda: (stops if stops is not None else []).append(1),
        on_bad_message=lambda why, _sample: (bad if bad is not None else []).append(why),
    )
    await ser.setup(SETUP)
    return ser


@pytest.mark.parametrize("encoding", ["PCMU", "PCMA"])
async def test_the_same_samples_as_pipecats_own_serializer_in_60_ms_frames(encoding: str) -> None:
    stock = TelnyxFrameSerializer(
        "S1",
        outbound_encoding=encoding,
        inbound_encoding=encoding,
        params=TelnyxFrameSerializer.InputParams(auto_hang_up=False),
    )
    await stock.setup(SETUP)
    batching = await ours(encoding)
    tone = (3000 * np.sin(np.arange(12 * FRAME_BYTES) * 0.05)).astype("<i2").tobytes()
    g711 = ENCODE[encoding](tone, 2)
    stock_audio, our_audio, our_frames = b"", b"", 0
    for i in range(0, len(g711), FRAME_BYTES):
        message = media(g711[i : i + FRAME_BYTES])
        stock_frame = await stock.deserialize(message)
        our_frame = await batching.deserialize(message)
        assert isinstance(stock_frame, InputAudioRawFrame)
        stock_audio += stock_frame.audio
        if our_frame is not None:
            assert isinstance(our_frame, InputAudioRawFrame)
            assert our_frame.sample_rate == TELEPHONY_SAMPLE_RATE
            assert len(our_frame.audio) == 2 * TELEPHONY_SAMPLE_RATE * INPUT_FRAME_MS // 1000
            our_audio += our_frame.audio
            our_frames += 1
    assert our_frames == 4 and our_audio == stock_audio


@pytest.mark.parametrize("codec", ["PCMU", "PCMA"])
async def test_bot_audio_goes_out_in_the_codec_the_texml_asked_for(codec: str) -> None:
    ser = BatchingTelnyxSerializer(
        "S1",
        caller_encoding="PCMU",
        bot_encoding=codec,  # type: ignore[arg-type]
        on_stop=lambda: None,
        on_bad_message=lambda _why, _sample: None,
        frame_ms=INPUT_FRAME_MS,
    )
    await ser.setup(SETUP)
    tone = (3000 * np.sin(np.arange(FRAME_BYTES) * 0.05)).astype("<i2").tobytes()
    out = await ser.serialize(
        OutputAudioRawFrame(audio=tone, sample_rate=TELEPHONY_SAMPLE_RATE, num_channels=1)
    )
    assert isinstance(out, str)
    message = json.loads(out)
    assert message["event"] == "media"
    assert base64.b64decode(message["media"]["payload"]) == ENCODE[codec](tone, 2)
    assert json.loads(str(await ser.serialize(InterruptionFrame()))) == {"event": "clear"}


async def test_garbage_is_reported_and_dropped_and_stop_calls_back() -> None:
    stops: list[int] = []
    bad: list[str] = []
    ser = await ours("PCMU", stops=stops, bad=bad)
    junk = (
        "not json",
        "[1, 2]",
        json.dumps({"event": "media"}),
        json.dumps({"event": "media", "media": "x"}),
        json.dumps({"event": "media", "media": {"payload": "abc"}}),
        json.dumps({"event": "media", "media": {"payload": 12345}}),
        json.dumps({"event": "dtmf", "dtmf": {"digit": "Z"}}),
        json.dumps({"event": "error", "payload": {"code": 100002, "title": "unknown_error"}}),
        b"\x00\xff",
        "x" * 100_000,
    )
    for message in junk:
        assert await ser.deserialize(message) is None
    assert len(bad) == len(junk)
    harmless = (
        "{}",
        json.dumps({"event": "mark", "stream_id": "S1", "mark": {"name": "m"}}),
        media(b"\xff" * FRAME_BYTES * 3, track="outbound"),  # the bot's own audio echoed
    )
    for message in harmless:
        assert await ser.deserialize(message) is None
    assert len(bad) == len(junk)
    keypress = await ser.deserialize(json.dumps({"event": "dtmf", "dtmf": {"digit": "1"}}))
    assert isinstance(keypress, InputDTMFFrame) and keypress.button.value == "1"
    assert not stops
    assert await ser.deserialize(json.dumps({"event": "stop", "stream_id": "S1"})) is None
    assert stops == [1]
