"""One typed settings tree for the whole server.

Sources, later ones winning: defaults below → ``config/<profile>.toml`` → ``VOICE_AGENT_*``
environment variables (nested with ``__``, e.g. ``VOICE_AGENT_STT__URL``). The profile is
``default`` unless ``--profile`` or ``VOICE_AGENT_PROFILE`` names another. A wrong or missing
setting fails at start with :class:`ConfigError`, naming the setting and the fix.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import VOXTRAL_MODEL

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"
ENV_PREFIX = "VOICE_AGENT_"
PROFILES = ("default", "vllm", "sagemaker")


class ConfigError(ValueError):
    """A setting is wrong or missing; the message says which one and how to fix it."""


class _Section(BaseModel):
    model_config = {"extra": "forbid"}


class SageMakerSettings(_Section):
    """Where the Voxtral endpoint lives on SageMaker (credentials come from the AWS chain)."""

    endpoint_name: str = ""
    region: str = ""
    target_variant: str | None = None
    invocation_path: str | None = None
    endpoint_url: str | None = Field(
        default=None, description="Override the runtime URL (tests, VPC endpoints)."
    )


class STTSettings(_Section):
    """The Voxtral realtime STT stage. ``params`` is the service's own tuning dataclass
    (:class:`~agent.stt.params.RealtimeSTTParams`), taken as it is."""

    transport: Literal["websocket", "sagemaker"] = "websocket"
    url: str = "ws://127.0.0.1:8090/v1/realtime"
    model: str = VOXTRAL_MODEL
    api_key: str | None = None
    params: RealtimeSTTParams = RealtimeSTTParams()
    sagemaker: SageMakerSettings = SageMakerSettings()

    @field_validator("url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(
                "must start with ws:// or wss:// (e.g. ws://127.0.0.1:8000/v1/realtime)"
            )
        return url


class ASRServerSettings(_Section):
    """The offline CPU recognizer that speaks vLLM's realtime protocol (default profile)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    served_model_name: str = VOXTRAL_MODEL
    decode_interval_s: float = Field(default=0.5, gt=0)
    cpu_threads: int = Field(default=2, ge=1)


class LLMSettings(_Section):
    """The turn handler. With no ``base_url`` the built-in offline responder answers."""

    base_url: str | None = None
    model: str = ""
    api_key: str = "not-needed"
    system_prompt: str = (
        "You are a helpful voice assistant. Answer in one or two short spoken sentences, "
        "without lists or markdown."
    )
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=200, ge=1)
    tools: list[str] = Field(
        default_factory=lambda: [],
        description="Registered tools to offer the model (agent/llm/tools.py), e.g. "
        '["get_current_time"]. vLLM needs --enable-auto-tool-choice for tools.',
    )

    @model_validator(mode="after")
    def _model_with_url(self) -> LLMSettings:
        if self.base_url and not self.model:
            raise ValueError(
                "llm.model is required when llm.base_url is set "
                "(set VOICE_AGENT_LLM__MODEL to the served model name)"
            )
        return self


class TTSSettings(_Section):
    """Speech synthesis: Piper out of process (offline) or any OpenAI-compatible speech server."""

    kind: Literal["piper", "openai"] = "piper"
    base_url: str = "http://127.0.0.1:8091"
    model: str = "kokoro"
    voice: str = "af_heart"
    api_key: str = "not-needed"
    sample_rate: int = Field(default=22050, gt=0)


class IceServerSettings(_Section):
    """A STUN or TURN server for WebRTC calls across networks (TURN needs credentials)."""

    urls: str | list[str]
    username: str | None = None
    credential: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, value: Any) -> Any:
        return {"urls": value} if isinstance(value, str) else value


class TurnSettings(_Section):
    """When a user turn starts and ends (Silero VAD, the words, optionally Smart Turn)."""

    vad_start_secs: float = Field(default=0.2, gt=0, le=2)
    vad_stop_secs: float = Field(default=0.2, gt=0, le=2)
    end_of_turn: Literal["silence", "adaptive"] = Field(
        default="adaptive",
        description="'adaptive': end soon after a complete question (complete_wait_s), else "
        "after unfinished_wait_s of quiet; 'silence': after vad_stop_secs plus "
        "user_speech_timeout_s. See bench/results/turn_taking.md.",
    )
    smart_turn: bool = Field(
        default=True,
        description="Ask Smart Turn v3 too: with 'adaptive', a question ends early only if it "
        "agrees; with 'silence', it decides the end of turn (Pipecat's strategy).",
    )
    complete_wait_s: float = Field(
        default=0.0, ge=0, le=3, description="'adaptive': quiet before a complete question ends."
    )
    unfinished_wait_s: float = Field(
        default=1.3,
        ge=0,
        le=3,
        description="'adaptive': quiet before any other turn ends; the upper bound of the wait.",
    )
    user_speech_timeout_s: float = Field(
        default=0.0, ge=0, le=5, description="'silence': extra quiet after the VAD stop."
    )

    @model_validator(mode="after")
    def _bound_holds(self) -> TurnSettings:
        if self.complete_wait_s > self.unfinished_wait_s:
            raise ValueError(
                f"turn.complete_wait_s ({self.complete_wait_s}) must not exceed "
                f"turn.unfinished_wait_s ({self.unfinished_wait_s}), the upper bound"
            )
        return self


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=7860, ge=0, le=65535)
    max_calls: int = Field(default=50, ge=1)
    public_url: str | None = None
    ice_servers: list[IceServerSettings] = Field(
        default_factory=lambda: [],
        description='STUN/TURN servers: "stun:host:3478" or {urls, username, credential}.',
    )
    start_local_services: bool = True
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=60,
        description="A connection whose request headers (or WebSocket handshake) are not "
        "complete by then is closed: half-open requests cannot pile up.",
    )
    max_connections: int = Field(
        default=10_000,
        ge=16,
        description="Open connections of all kinds; beyond it new ones get 503 at once.",
    )
    requests_per_source_per_s: float = Field(
        default=5.0,
        gt=0,
        description="WebRTC offers and /start, and telephony webhooks, per client address "
        "(a token bucket; over it: 429).",
    )
    request_burst_per_source: int = Field(default=20, ge=1)
    drain_timeout_s: float = Field(
        default=120.0,
        ge=0,
        description="On SIGTERM, how long calls in progress may go on before they are closed "
        "(1001 going away); give orchestrators a grace period above it.",
    )
    api_token: str | None = Field(
        default=None,
        description="Bearer token for the operator API (GET /calls/{id}: a call's transcript); "
        "unset, the operator API is off.",
    )


class TwilioSettings(_Section):
    auth_token: str | None = None


class ObservabilitySettings(_Section):
    """Per-turn latency: structured log lines, Prometheus at ``/metrics``, optional traces."""

    log_turns: bool = Field(
        default=True, description="Log one structured line per user turn with each stage in ms."
    )
    otel_enabled: bool = Field(
        default=False,
        description="Export OpenTelemetry traces (a span per call, per turn and per stage); "
        "needs the tracing extra: pip install 'voice-agent[tracing]'.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (/v1/traces is added); "
        "unset: the OTEL_EXPORTER_OTLP_* environment, else http://localhost:4318.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_endpoint(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https:// (OTLP over HTTP)")
        return url


class Settings(BaseSettings):
    """The whole tree. Build it with :func:`load_settings`, not directly."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    profile: str = "default"
    server: ServerSettings = ServerSettings()
    stt: STTSettings = STTSettings()
    asr_server: ASRServerSettings = ASRServerSettings()
    llm: LLMSettings = LLMSettings()
    tts: TTSSettings = TTSSettings()
    turn: TurnSettings = TurnSettings()
    twilio: TwilioSettings = TwilioSettings()
    observability: ObservabilitySettings = ObservabilitySettings()

    @model_validator(mode="after")
    def _sagemaker_needs_endpoint(self) -> Settings:
        age = self.stt.params.max_connection_age_s
        if self.stt.transport == "sagemaker" and age is not None and age >= 30 * 60:
            raise ValueError(
                "stt.params.max_connection_age_s must be under 1800 s with SageMaker, which "
                "caps a stream at about 30 minutes (set it to 1500)"
            )
        if self.stt.transport == "sagemaker":
            missing = [
                name
                for name in ("endpoint_name", "region")
                if not getattr(self.stt.sagemaker, name)
            ]
            if missing:
                raise ValueError(
                    "stt.transport is 'sagemaker' but stt.sagemaker."
                    + " and stt.sagemaker.".join(missing)
                    + " is not set (set VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME and "
                    "VOICE_AGENT_STT__SAGEMAKER__REGION)"
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the profile file, which is passed in as init values.
        return env_settings, init_settings


def load_settings(
    profile: str | None = None,
    *,
    config_dir: Path = CONFIG_DIR,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Read ``config/<profile>.toml`` plus ``VOICE_AGENT_*`` overrides into :class:`Settings`.

    Raises:
        ConfigError: unknown profile, unreadable TOML, or an invalid/missing setting.
    """
    profile = profile or os.environ.get(f"{ENV_PREFIX}PROFILE") or "default"
    path = config_dir / f"{profile}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in config_dir.glob("*.toml"))) or "none"
        raise ConfigError(
            f"unknown profile {profile!r}: there is no {path}. Known profiles: {known}."
        )
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix the file.") from exc
    values["profile"] = profile
    _merge(values, overrides or {})
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path)) from None


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


_PARAM_NAMES = frozenset(field.name for field in fields(RealtimeSTTParams))


def _explain(exc: ValidationError, path: Path) -> str:
    lines = [f"invalid configuration (profile file {path}):"]
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if loc[-1:] == ["params"] and error["type"] == "value_error":
            knob = str(error["msg"]).removeprefix("Value error, ").split(" ", 1)[0]
            if knob in _PARAM_NAMES:  # RealtimeSTTParams names the knob in its message
                loc.append(knob)
        dotted = ".".join(loc)
        env = ENV_PREFIX + "__".join(part.upper() for part in loc)
        if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            hint = "remove it: there is no such setting (check the spelling)"
        else:
            hint = f"fix it in {path.name} or set {env}"
        lines.append(f"  - {dotted or 'settings'}: {error['msg']}; {hint}")
    return "\n".join(lines)
