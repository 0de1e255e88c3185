"""The vLLM Realtime API (``/v1/realtime``) as types.

Every message is a JSON text frame with a ``type``. We parse leniently (unknown events
and unknown fields are kept, not rejected, because vLLM versions differ) and serialize
strictly (exactly the fields vLLM reads). Both directions live here so that the client
(our STT service), the offline ASR server and the container bridge share one vocabulary.

Client → server: ``session.update``, ``input_audio_buffer.append``, ``input_audio_buffer.commit``.
Server → client: ``session.created``, ``session.updated``, ``transcription.delta``,
``transcription.done``, ``error``.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any

SAMPLE_RATE = 16_000
"""vLLM's realtime endpoint takes 16 kHz mono PCM16 LE; nothing on the wire says so."""

VOXTRAL_MODEL = "mistralai/Voxtral-Mini-4B-Realtime-2602"
"""The model this client is built for. A server's served name may differ: see its
``--served-model-name``."""


class ProtocolError(ValueError):
    """A message that is not a valid realtime event (bad JSON, no ``type``, wrong field types)."""

    def __init__(self, message: str, *, code: str = "invalid_event") -> None:
        super().__init__(message)
        self.code = code


# ----------------------------------------------------------------------------- client events


@dataclass(frozen=True, slots=True)
class SessionUpdate:
    """Selects the served model; vLLM requires it before the first commit.

    ``model`` is ``None`` only when parsed from a message that lacked it (vLLM answers
    ``invalid_event``); an empty string means "the default model" to vLLM.
    """

    model: str | None
    type: str = "session.update"

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "model": self.model})


@dataclass(frozen=True, slots=True)
class AudioAppend:
    """A chunk of 16 kHz mono PCM16 audio, base64 in ``audio``."""

    audio: str
    type: str = "input_audio_buffer.append"

    @classmethod
    def from_pcm(cls, pcm: bytes) -> AudioAppend:
        return cls(base64.b64encode(pcm).decode("ascii"))

    def pcm(self) -> bytes:
        """Decode the audio; :class:`ProtocolError` (``invalid_audio``) if it isn't base64."""
        try:
            return base64.b64decode(self.audio, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ProtocolError(f"audio is not valid base64: {exc}", code="invalid_audio") from exc

    def to_json(self) -> str:
        return encode_append(self.audio)


@dataclass(frozen=True, slots=True)
class Commit:
    """``final=False`` starts a generation; ``final=True`` ends the audio and asks for ``done``."""

    final: bool = False
    type: str = "input_audio_buffer.commit"

    def to_json(self) -> str:
        return _FINAL_COMMIT if self.final else _START_COMMIT


ClientEvent = SessionUpdate | AudioAppend | Commit

_START_COMMIT = '{"type": "input_audio_buffer.commit"}'
_FINAL_COMMIT = '{"type": "input_audio_buffer.commit", "final": true}'
_APPEND_PREFIX = '{"type": "input_audio_buffer.append", "audio": "'


def encode_append(audio_b64: str) -> str:
    """Frame a base64 chunk as an append event.

    The hot path of every call: base64 never needs JSON escaping, so plain concatenation
    yields the same text as ``json.dumps`` at a fraction of the cost (see ``bench/``).
    """
    return _APPEND_PREFIX + audio_b64 + '"}'


def encode_pcm_append(pcm: bytes) -> str:
    """Base64 and frame raw PCM16 in one step."""
    return encode_append(base64.b64encode(pcm).decode("ascii"))


# ----------------------------------------------------------------------------- server events


@dataclass(frozen=True, slots=True)
class SessionCreated:
    id: str = ""
    created: int = 0
    type: str = "session.created"

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "id": self.id, "created": self.created})


@dataclass(frozen=True, slots=True)
class SessionUpdated:
    raw: dict[str, Any] = field(default_factory=dict)
    type: str = "session.updated"

    def to_json(self) -> str:
        return json.dumps({**self.raw, "type": self.type})


@dataclass(frozen=True, slots=True)
class TranscriptionDelta:
    delta: str = ""
    type: str = "transcription.delta"

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "delta": self.delta})


@dataclass(frozen=True, slots=True)
class TranscriptionDone:
    text: str = ""
    usage: dict[str, Any] | None = None
    type: str = "transcription.done"

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "text": self.text, "usage": self.usage})


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    error: str
    code: str | None = None
    type: str = "error"

    def to_json(self) -> str:
        return json.dumps({"type": self.type, "error": self.error, "code": self.code})


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event this client doesn't know; kept so callers can log it and move on."""

    type: str
    raw: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({**self.raw, "type": self.type})


ServerEvent = (
    SessionCreated
    | SessionUpdated
    | TranscriptionDelta
    | TranscriptionDone
    | ErrorEvent
    | UnknownEvent
)


# ----------------------------------------------------------------------------- parsing


def _load_object(message: str | bytes) -> dict[str, Any]:
    try:
        data = json.loads(message)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"message is not JSON: {exc}", code="invalid_json") from exc
    except RecursionError as exc:
        raise ProtocolError("message nests too deeply", code="invalid_json") from exc
    if not isinstance(data, dict):
        raise ProtocolError(
            f"message must be a JSON object, got {type(data).__name__}", code="invalid_json"
        )
    event_type = data.get("type")
    if not isinstance(event_type, str):
        raise ProtocolError("message has no string 'type' field", code="invalid_event")
    return data


def _text_field(data: dict[str, Any], name: str) -> str:
    value = data.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"'{data['type']}' field '{name}' must be a string")
    return value


def parse_server_event(message: str | bytes) -> ServerEvent:
    """Parse one server message. Unknown types become :class:`UnknownEvent`; never crashes.

    Raises:
        ProtocolError: the message is not a JSON object with a string ``type``, or a known
            event carries a field of the wrong type.
    """
    data = _load_object(message)
    event_type: str = data["type"]
    if event_type == "transcription.delta":
        return TranscriptionDelta(_text_field(data, "delta"))
    if event_type == "transcription.done":
        usage = data.get("usage")
        return TranscriptionDone(
            _text_field(data, "text"), usage if isinstance(usage, dict) else None
        )
    if event_type == "session.created":
        created = data.get("created")
        return SessionCreated(
            str(data.get("id") or ""),
            created if isinstance(created, int) and not isinstance(created, bool) else 0,
        )
    if event_type == "session.updated":
        return SessionUpdated(data)
    if event_type == "error":
        return _parse_error(data)
    return UnknownEvent(event_type, data)


def _parse_error(data: dict[str, Any]) -> ErrorEvent:
    """vLLM sends ``{"error": "...", "code": "..."}``; OpenAI-style peers nest an object."""
    error = data.get("error")
    code = data.get("code")
    if isinstance(error, dict):
        code = code or error.get("code") or error.get("type")
        error = error.get("message")
    message = error if isinstance(error, str) and error else "unknown error"
    return ErrorEvent(message, code if isinstance(code, str) else None)


def parse_client_event(message: str | bytes) -> ClientEvent:
    """Parse one client message the way vLLM's server does (used by our ASR server and tests).

    Raises:
        ProtocolError: with the code vLLM would answer (``invalid_json``, ``unknown_event``,
            ``invalid_event``).
    """
    data = _load_object(message)
    event_type: str = data["type"]
    if event_type == "input_audio_buffer.append":
        audio = data.get("audio")
        if not isinstance(audio, str):
            raise ProtocolError("'audio' must be a base64 string", code="invalid_audio")
        return AudioAppend(audio)
    if event_type == "input_audio_buffer.commit":
        return Commit(final=data.get("final") is True)
    if event_type == "session.update":
        model = data.get("model")
        if model is not None and not isinstance(model, str):
            raise ProtocolError("'model' must be a string")
        return SessionUpdate(model)
    raise ProtocolError(f"Unknown event type: {event_type}", code="unknown_event")
