"""The realtime protocol types: strict on the way out, lenient on the way in, never a crash."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.stt.protocol import (
    AudioAppend,
    Commit,
    ErrorEvent,
    ProtocolError,
    SessionCreated,
    SessionUpdate,
    SessionUpdated,
    TranscriptionDelta,
    TranscriptionDone,
    UnknownEvent,
    encode_pcm_append,
    parse_client_event,
    parse_server_event,
)

SERVER_EVENTS = [
    SessionCreated("sess-123", 1_760_000_000),
    TranscriptionDelta(""),
    TranscriptionDelta(' hello "quoted" wörld'),
    TranscriptionDone("hello world", {"prompt_tokens": 12, "total_tokens": 15}),
    TranscriptionDone("", None),
    ErrorEvent("Unknown model", "model_not_found"),
]


@pytest.mark.parametrize("event", SERVER_EVENTS, ids=lambda e: e.type)
def test_server_events_round_trip(event: object) -> None:
    assert parse_server_event(event.to_json()) == event  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "event",
    [
        SessionUpdate("mistralai/Voxtral-Mini-4B-Realtime-2602"),
        AudioAppend.from_pcm(b"\x01\x00" * 7),
        Commit(final=False),
        Commit(final=True),
    ],
    ids=lambda e: f"{e.type}",
)
def test_client_events_round_trip(event: object) -> None:
    assert parse_client_event(event.to_json()) == event  # type: ignore[attr-defined]


def test_client_events_serialize_exactly_what_vllm_reads() -> None:
    assert json.loads(Commit().to_json()) == {"type": "input_audio_buffer.commit"}
    assert json.loads(Commit(final=True).to_json()) == {
        "type": "input_audio_buffer.commit",
        "final": True,
    }
    assert json.loads(encode_pcm_append(b"\x00\x01")) == {
        "type": "input_audio_buffer.append",
        "audio": "AAE=",
    }


@given(st.binary(max_size=4096))
def test_the_fast_append_encoder_equals_json_dumps(pcm: bytes) -> None:
    assert json.loads(encode_pcm_append(pcm)) == json.loads(AudioAppend.from_pcm(pcm).to_json())


def test_unknown_events_and_fields_are_tolerated() -> None:
    event = parse_server_event('{"type": "session.updated", "model": "x", "extra": [1]}')
    assert isinstance(event, SessionUpdated)
    future = parse_server_event('{"type": "transcription.segment", "start": 0.1}')
    assert future == UnknownEvent(
        "transcription.segment", {"type": "transcription.segment", "start": 0.1}
    )
    done = parse_server_event('{"type": "transcription.done", "text": "hi", "language": "en"}')
    assert done == TranscriptionDone("hi", None)


def test_openai_style_nested_errors_are_understood() -> None:
    event = parse_server_event(
        '{"type": "error", "error": {"message": "bad model", "code": "model_not_found"}}'
    )
    assert event == ErrorEvent("bad model", "model_not_found")


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ('{"no_type": 1}', "invalid_event"),
        ('{"type": "transcription.delta", "delta": 5}', "invalid_event"),
        (b"\xff\xfe", "invalid_json"),
    ],
)
def test_garbage_from_the_server_is_a_clear_protocol_error(message: str | bytes, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_server_event(message)
    assert caught.value.code == code


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ("{", "invalid_json"),
        ('{"type": "response.create"}', "unknown_event"),
        ('{"type": "input_audio_buffer.append", "audio": 3}', "invalid_audio"),
    ],
)
def test_client_messages_fail_with_the_code_vllm_answers(message: str, code: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_client_event(message)
    assert caught.value.code == code


def test_bad_base64_audio_is_invalid_audio() -> None:
    with pytest.raises(ProtocolError) as caught:
        AudioAppend("not base64!!").pcm()
    assert caught.value.code == "invalid_audio"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        json_values.map(json.dumps),
        st.dictionaries(
            st.sampled_from(["type", "delta", "text", "error", "code", "usage", "id", "created"]),
            json_values,
        )
        .map(lambda d: {**d, "type": d.get("type", "transcription.done")})
        .map(json.dumps),
    )
)
def test_fuzzed_server_messages_parse_or_fail_cleanly(message: str | bytes) -> None:
    try:
        event = parse_server_event(message)
    except ProtocolError as exc:
        assert str(exc)
    else:
        assert isinstance(
            event,
            SessionCreated
            | SessionUpdated
            | TranscriptionDelta
            | TranscriptionDone
            | ErrorEvent
            | UnknownEvent,
        )


@settings(max_examples=500)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200),
        json_values.map(json.dumps),
        st.dictionaries(
            st.sampled_from(["type", "audio", "model", "final", "language", "prompt"]),
            json_values,
        )
        .map(
            lambda d: {
                **d,
                "type": d.get(
                    "type",
                    "input_audio_buffer.append",
                ),
            }
        )
        .map(json.dumps),
    )
)
def test_fuzzed_client_messages_parse_or_fail_with_vllms_error_codes(message: str | bytes) -> None:
    """What the ASR server (and a vLLM stand-in) reads from a client never raises anything but
    a ``ProtocolError`` carrying one of vLLM's error codes."""
    try:
        parse_client_event(message)
    except ProtocolError as exc:
        assert exc.code in ("invalid_json", "unknown_event", "invalid_event", "invalid_audio")
