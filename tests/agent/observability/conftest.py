"""Fixtures for the observability tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from loguru import logger


@pytest.fixture
def turn_log() -> Iterator[list[dict[str, Any]]]:
    """The ``turn_latency`` log records (their bound fields, plus ``text``: the message)."""
    records: list[dict[str, Any]] = []
    sink = logger.add(
        lambda message: records.append(
            dict(message.record["extra"], text=message.record["message"])
        ),
        filter=lambda record: record["extra"].get("event") == "turn_latency",
    )
    try:
        yield records
    finally:
        logger.remove(sink)
