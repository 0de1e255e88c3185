"""Audio conversion for the endpoint: the recognizer's input is a function of the caller's
audio alone, however the frames come and whatever else is being converted beside them."""

from __future__ import annotations

import numpy as np

from agent.stt.audio import StreamConverter, resample
from tests.fakes.speech import speech_at

FRAME_BYTES = 320  # 20 ms at 8 kHz


def converted(pcm: bytes, converter: StreamConverter) -> bytes:
    out = b"".join(
        converter.convert(pcm[i : i + FRAME_BYTES], 8000) for i in range(0, len(pcm), FRAME_BYTES)
    )
    return out + converter.flush()


def test_the_same_call_converts_to_the_same_samples_beside_other_calls() -> None:
    """soxr dithers integer output with a random seed per stream: before, two streams of the
    same phone audio differed in their last bits, which was enough for tiny.en to hear
    "lights in the kitchen" as "life in my kitchen" in one run and not the next."""
    pcm = speech_at("turn on the lights in the kitchen", 8000)
    alone = converted(pcm, StreamConverter())
    converters = [StreamConverter() for _ in range(3)]
    side_by_side = [b""] * len(converters)
    for i in range(0, len(pcm), FRAME_BYTES):
        for k, converter in enumerate(converters):
            side_by_side[k] += converter.convert(pcm[i : i + FRAME_BYTES], 8000)
    side_by_side = [out + c.flush() for out, c in zip(side_by_side, converters, strict=True)]
    assert side_by_side == [alone, alone, alone]
    assert converted(pcm, StreamConverter()) == alone


def test_a_stream_converts_as_the_whole_buffer_does() -> None:
    """Frame by frame or all at once, the same filter: no clicks at frame edges."""
    pcm = speech_at("turn on the lights in the kitchen", 8000)
    streamed = np.frombuffer(converted(pcm, StreamConverter()), "<i2").astype(np.int32)
    whole = np.frombuffer(resample(pcm, 8000), "<i2").astype(np.int32)
    assert abs(len(streamed) - len(whole)) <= 2
    n = min(len(streamed), len(whole))
    assert np.max(np.abs(streamed[:n] - whole[:n])) <= 1
    assert resample(pcm, 8000) == resample(pcm, 8000)
