"""The bridge's settings, read from the environment once at start.

The container has no config files: SageMaker passes everything as environment variables,
so each setting is one variable with a safe default, and a bad value stops the bridge
with a message naming the variable instead of failing later mid-call.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_UPSTREAM_URL = "ws://127.0.0.1:8081/v1/realtime"
STREAM_PATH = "/invocations-bidirectional-stream"
"""The path SageMaker opens on port 8080 for every bidirectional stream."""


class SettingsError(ValueError):
    """An environment variable holds a value the bridge cannot use."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeSettings:
    """Everything the bridge can be told; the field comments name the variable."""

    upstream_url: str = DEFAULT_UPSTREAM_URL  # UPSTREAM_URL
    health_url: str = ""  # UPSTREAM_HEALTH_URL (default: /health on the upstream's host)
    host: str = "0.0.0.0"  # BRIDGE_HOST
    port: int = 8080  # BRIDGE_PORT
    max_message_bytes: int = 16 * 1024 * 1024  # BRIDGE_MAX_MESSAGE_BYTES (vLLM's own limit)
    upstream_max_queue: int = 16  # BRIDGE_UPSTREAM_MAX_QUEUE (messages buffered from vLLM)
    upstream_open_timeout_s: float = 5.0  # BRIDGE_UPSTREAM_OPEN_TIMEOUT_S
    upstream_close_timeout_s: float = 2.0  # BRIDGE_UPSTREAM_CLOSE_TIMEOUT_S
    send_timeout_s: float = 30.0  # BRIDGE_SEND_TIMEOUT_S (a side that takes nothing is stuck)
    upstream_ping_interval_s: float | None = 20.0  # BRIDGE_UPSTREAM_PING_INTERVAL_S (0 = off)
    client_ping_interval_s: float | None = None  # BRIDGE_CLIENT_PING_INTERVAL_S (0 = off)
    health_timeout_s: float = 2.0  # BRIDGE_HEALTH_TIMEOUT_S
    health_cache_s: float = 1.0  # BRIDGE_HEALTH_CACHE_S
    per_message_deflate: bool = False  # BRIDGE_PER_MESSAGE_DEFLATE
    log_level: str = "info"  # BRIDGE_LOG_LEVEL

    def __post_init__(self) -> None:
        if not self.upstream_url.startswith(("ws://", "wss://")):
            raise SettingsError(
                f"UPSTREAM_URL must be a ws:// or wss:// URL, got {self.upstream_url!r}"
            )
        if not self.health_url:
            object.__setattr__(self, "health_url", health_url_for(self.upstream_url))
        if self.max_message_bytes < 1024:
            raise SettingsError("BRIDGE_MAX_MESSAGE_BYTES must be at least 1024")
        if self.upstream_max_queue < 1:
            raise SettingsError("BRIDGE_UPSTREAM_MAX_QUEUE must be at least 1")
        if not 0 <= self.port < 65536:
            raise SettingsError(f"BRIDGE_PORT must be a TCP port, got {self.port}")

    @property
    def hard_message_bytes(self) -> int:
        """The protocol layer's limit: twice ours, so an oversized message still gets a
        polite ``error`` event before the close; past this the socket closes with 1009 alone."""
        return 2 * self.max_message_bytes

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BridgeSettings:
        """Build settings from ``environ`` (default: the process environment).

        Raises:
            SettingsError: a variable is set to something unusable; the message names it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for field in fields(cls):
            name = _ENV_NAMES[field.name]
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                continue
            parse = _PARSERS.get(field.name, str)
            try:
                values[field.name] = parse(raw.strip())
            except ValueError as exc:
                raise SettingsError(f"{name}={raw!r} is not valid: {exc}") from exc
        return cls(**values)


def health_url_for(upstream_url: str) -> str:
    """vLLM answers ``GET /health`` on the same host and port as its WebSocket."""
    parts = urlsplit(upstream_url)
    scheme = "https" if parts.scheme == "wss" else "http"
    return urlunsplit((scheme, parts.netloc, "/health", "", ""))


def _bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _positive_float(raw: str) -> float:
    value = float(raw)
    if value <= 0:
        raise ValueError("must be greater than 0")
    return value


def _optional_interval(raw: str) -> float | None:
    """``0`` turns a keepalive off."""
    value = float(raw)
    if value < 0:
        raise ValueError("must be 0 (off) or a number of seconds")
    return value or None


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _log_level(raw: str) -> str:
    level = raw.lower()
    if level not in ("critical", "error", "warning", "info", "debug"):
        raise ValueError("expected one of critical, error, warning, info, debug")
    return level


_ENV_NAMES: dict[str, str] = {
    "upstream_url": "UPSTREAM_URL",
    "health_url": "UPSTREAM_HEALTH_URL",
    "host": "BRIDGE_HOST",
    "port": "BRIDGE_PORT",
    "max_message_bytes": "BRIDGE_MAX_MESSAGE_BYTES",
    "upstream_max_queue": "BRIDGE_UPSTREAM_MAX_QUEUE",
    "upstream_open_timeout_s": "BRIDGE_UPSTREAM_OPEN_TIMEOUT_S",
    "upstream_close_timeout_s": "BRIDGE_UPSTREAM_CLOSE_TIMEOUT_S",
    "send_timeout_s": "BRIDGE_SEND_TIMEOUT_S",
    "upstream_ping_interval_s": "BRIDGE_UPSTREAM_PING_INTERVAL_S",
    "client_ping_interval_s": "BRIDGE_CLIENT_PING_INTERVAL_S",
    "health_timeout_s": "BRIDGE_HEALTH_TIMEOUT_S",
    "health_cache_s": "BRIDGE_HEALTH_CACHE_S",
    "per_message_deflate": "BRIDGE_PER_MESSAGE_DEFLATE",
    "log_level": "BRIDGE_LOG_LEVEL",
}

_PARSERS: dict[str, Callable[[str], Any]] = {
    "port": int,
    "max_message_bytes": int,
    "upstream_max_queue": int,
    "upstream_open_timeout_s": _positive_float,
    "upstream_close_timeout_s": _positive_float,
    "send_timeout_s": _positive_float,
    "upstream_ping_interval_s": _optional_interval,
    "client_ping_interval_s": _optional_interval,
    "health_timeout_s": _positive_float,
    "health_cache_s": _non_negative_float,
    "per_message_deflate": _bool,
    "log_level": _log_level,
}
