"""Structured logs: one JSON object per line on stderr, for CloudWatch and ``jq``.

Callers pass fields with ``extra={"fields": {...}}``; uvicorn's own loggers go through the
same formatter so a container's log is uniformly machine-readable.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

LOGGER_NAME = "voxtral.bridge"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "event", ...fields}``; exceptions go in ``exc``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def log_config(level: str) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the bridge and uvicorn (passed to uvicorn)."""
    upper = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            LOGGER_NAME: {"handlers": ["stderr"], "level": upper, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": upper, "propagate": False},
            "uvicorn.error": {"level": upper},
            "uvicorn.access": {"handlers": ["stderr"], "level": upper, "propagate": False},
        },
    }


class ClientFaultsWithoutTracebacks(logging.Filter):
    """uvicorn logs a client's invalid UTF-8 text frame with a full traceback at ERROR, though
    it answers it correctly (close 1007): the client is at fault, not the bridge. Such records
    become one WARNING line without the traceback."""

    CLIENT_FAULTS = ("Invalid UTF-8 sequence received from client",)

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith(self.CLIENT_FAULTS):
            record.exc_info = None
            record.exc_text = None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def quiet_client_faults() -> None:
    """Put :class:`ClientFaultsWithoutTracebacks` on uvicorn's error logger (once)."""
    uvicorn_errors = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, ClientFaultsWithoutTracebacks) for f in uvicorn_errors.filters):
        uvicorn_errors.addFilter(ClientFaultsWithoutTracebacks())
