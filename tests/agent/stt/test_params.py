"""The service's knobs: declared once, checked when built, with the knob named on error."""

from __future__ import annotations

import dataclasses

import pytest

from agent.stt import RealtimeSTTParams


def test_the_defaults_are_valid_and_frozen() -> None:
    params = RealtimeSTTParams()
    assert params.preroll_s == 0.8 and params.chunk_ms == 20
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.chunk_ms = 40  # type: ignore[misc]


@pytest.mark.parametrize(
    "knob, value",
    [
        ("preroll_s", 2.5),
        ("chunk_ms", 5),
        ("stall_timeout_s", 0),
        ("max_connection_age_s", -1.0),
        ("reconnect_min_wait_s", 10.0),  # above the ceiling
        ("reconnect_attempts", 0),
    ],
)
def test_a_wrong_value_names_its_knob(knob: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{knob} "):
        RealtimeSTTParams(**{knob: value})  # type: ignore[arg-type]
