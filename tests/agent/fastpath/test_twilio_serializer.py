"""The batching Twilio serializer hands caller audio down the pipeline in ``INPUT_FRAME_MS``
frames, with exactly the samples Pipecat's own serializer decodes."""

from __future__ import annotations

import base64
import json
import warnings
from types import SimpleNamespace

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame
from pipecat.serializers.base_serializer import FrameSerializer
from pipecat.serializers.twilio import TwilioFrameSerializer

from agent.config import load_settings
from agent.fastpath.media_stream_reader import RealTimeBudget
from agent.fastpath.twilio_serializer import BatchingTwilioSerializer
from agent.transports.telephony import (
    INPUT_FRAME_MS,
    TELEPHONY_SAMPLE_RATE,
    StreamStart,
    TwilioProvider,
)

with warnings.catch_warnings():  # μ-law as Twilio speaks it; Python 3.12 still ships audioop
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

FRAME_BYTES = TELEPHONY_SAMPLE_RATE * 20 // 1000  # one 20 ms Twilio media message


def media(ulaw: bytes) -> str:
    payload = base64.b64encode(ulaw).decode()
    return json.dumps({"event": "media", "streamSid": "MZ1", "media": {"payload": payload}})


async def serializer(stops: list[int], bad: list[str] | None = None) -> FrameSerializer:
    provider = TwilioProvider(load_settings("default"))
    ser = provider.serializer(
        StreamStart("MZ1", "CA1"),
        on_stop=lambda: stops.append(1),
        on_bad_message=lambda why, sample: (bad if bad is not None else []).append(why),
    )
    # only the input rate matters to it (a FrameProcessorSetup needs a running worker)
    await ser.setup(SimpleNamespace(audio_in_sample_rate=TELEPHONY_SAMPLE_RATE))  # type: ignore[arg-type]
    return ser


async def test_three_media_messages_make_one_60_ms_frame_with_the_callers_samples() -> None:
    assert INPUT_FRAME_MS == 60
    ser = await serializer([])
    tone = (3000 * np.sin(np.arange(3 * FRAME_BYTES) * 0.3)).astype("<i2").tobytes()
    ulaw = audioop.lin2ulaw(tone, 2)
    messages = [ulaw[i : i + FRAME_BYTES] for i in range(0, len(ulaw), FRAME_BYTES)]

    assert await ser.deserialize(media(messages[0])) is None
    assert await ser.deserialize(media(messages[1])) is None
    frame = await ser.deserialize(media(messages[2]))

    assert isinstance(frame, InputAudioRawFrame)
    assert frame.sample_rate == TELEPHONY_SAMPLE_RATE and frame.num_channels == 1
    assert len(frame.audio) == 2 * 3 * FRAME_BYTES  # 60 ms of PCM16 at 8 kHz
    assert frame.audio == audioop.ulaw2lin(ulaw, 2)  # the caller's samples, in order
    # the next frame starts fresh
    assert await ser.deserialize(media(messages[0])) is None


async def test_stop_calls_back_and_garbage_is_reported_and_dropped() -> None:
    stops: list[int] = []
    bad: list[str] = []
    ser = await serializer(stops, bad)
    junk = (
        "not json",
        "[1, 2]",
        json.dumps({"event": "media"}),
        json.dumps({"event": "media", "media": "x"}),
        json.dumps({"event": "media", "media": {"payload": "abc"}}),
        json.dumps({"event": "media", "media": {"payload": 12345}}),
        json.dumps({"event": "dtmf", "dtmf": {"digit": "Z"}}),
        b"\x00\xff",
        "x" * 100_000,
    )
    for message in junk:
        assert await ser.deserialize(message) is None
    assert len(bad) == len(junk)
    for harmless in ("{}", json.dumps({"event": "mark", "mark": {"name": "m"}})):
        assert await ser.deserialize(harmless) is None
    assert len(bad) == len(junk)  # unknown or uninteresting events are not errors
    assert not stops
    assert await ser.deserialize(json.dumps({"event": "stop", "streamSid": "MZ1"})) is None
    assert stops == [1]


async def test_the_same_samples_as_pipecats_own_serializer() -> None:
    stock = TwilioFrameSerializer(
        "MZ1", "CA1", params=TwilioFrameSerializer.InputParams(auto_hang_up=False)
    )
    await stock.setup(SimpleNamespace(audio_in_sample_rate=TELEPHONY_SAMPLE_RATE))  # type: ignore[arg-type]
    ours = await serializer([])
    tone = (3000 * np.sin(np.arange(12 * FRAME_BYTES) * 0.05)).astype("<i2").tobytes()
    ulaw = audioop.lin2ulaw(tone, 2)
    stock_audio, our_audio = b"", b""
    for i in range(0, len(ulaw), FRAME_BYTES):
        message = media(ulaw[i : i + FRAME_BYTES])
        stock_frame, our_frame = await stock.deserialize(message), await ours.deserialize(message)
        assert isinstance(stock_frame, InputAudioRawFrame)
        stock_audio += stock_frame.audio
        if our_frame is not None:
            assert isinstance(our_frame, InputAudioRawFrame)
            assert our_frame.sample_rate == stock_frame.sample_rate
            our_audio += our_frame.audio
    assert our_audio == stock_audio


def test_the_real_time_budget_allows_a_burst_then_real_time() -> None:
    now = [100.0]
    budget = RealTimeBudget(8000, burst_s=2.0, clock=lambda: now[0])
    assert all(budget.admit(160) for _ in range(100))  # 2 s at once: the burst
    assert not budget.admit(160)
    now[0] += 1.0
    assert sum(budget.admit(160) for _ in range(100)) == 50  # then 1 s per second


async def test_audio_faster_than_real_time_is_dropped_and_reported() -> None:
    bad: list[str] = []
    now = [0.0]
    ser = BatchingTwilioSerializer(
        "MZ1",
        "CA1",
        on_stop=lambda: None,
        on_bad_message=lambda why, _sample: bad.append(why),
        frame_ms=INPUT_FRAME_MS,
        budget=RealTimeBudget(TELEPHONY_SAMPLE_RATE, burst_s=1.0, clock=lambda: now[0]),
    )
    await ser.setup(SimpleNamespace(audio_in_sample_rate=TELEPHONY_SAMPLE_RATE))  # type: ignore[arg-type]
    heard = 0
    for _ in range(500):  # 10 s of audio, all at the same instant
        frame = await ser.deserialize(media(b"\xff" * FRAME_BYTES))
        if isinstance(frame, InputAudioRawFrame):
            heard += len(frame.audio) // 2
    frame_samples = TELEPHONY_SAMPLE_RATE * INPUT_FRAME_MS // 1000
    whole_frames = TELEPHONY_SAMPLE_RATE // frame_samples
    assert heard == whole_frames * frame_samples  # the 1 s burst (in whole frames), not 10 s
    assert len(bad) == 450 and all("faster than real time" in why for why in bad)
