"""Pre-roll and per-turn audio bookkeeping."""

from __future__ import annotations

from agent.stt.turn import PreRoll, Turn, seconds_to_bytes


def test_preroll_keeps_exactly_the_newest_audio() -> None:
    preroll = PreRoll(0.1)  # 3200 bytes
    for value in range(10):
        preroll.hear(bytes([value]) * 640)
    kept = preroll.take()
    assert len(kept) == 3200
    assert kept == b"".join(bytes([v]) * 640 for v in range(5, 10))
    assert preroll.take() == b""


def test_a_zero_preroll_keeps_nothing() -> None:
    preroll = PreRoll(0.0)
    preroll.hear(b"\x01\x00" * 100)
    assert preroll.take() == b""


def test_turn_batches_sends_into_chunks_and_keeps_everything_for_replay() -> None:
    turn = Turn(chunk_bytes=seconds_to_bytes(0.04), max_bytes=10**6)
    frame = b"\x01\x00" * 320  # 20 ms
    assert turn.hear(frame) is None
    assert turn.hear(frame) == frame * 2
    assert turn.hear(frame) is None
    assert turn.take_outbox() == frame
    assert turn.replay() == frame * 3
    assert turn.audio_bytes == len(frame) * 3


def test_turn_stops_recording_past_its_cap_but_still_sends() -> None:
    turn = Turn(chunk_bytes=2, max_bytes=4)
    assert turn.hear(b"ab") == b"ab"
    assert turn.hear(b"cdef") == b"cdef"
    assert turn.replay() == b"ab"
