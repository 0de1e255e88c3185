"""The manifests' sizing comes from the capacity bench: a replica's call limit, its memory
and CPU, and the autoscalers' targets must fit what ``bench/capacity.py`` measured with the
shipped defaults (``bench/results/capacity.json``, written by the same run as
``capacity.md``). Re-run the bench after a change that moves the per-call cost; this fails
when the manifests promise more than it measured."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.deploy.manifests import ROOT, container, find

Resources = list[dict[str, Any]]
MEASURED = ROOT / "bench" / "results" / "capacity.json"
UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
CORE_SHARE = 0.8
"""The share of its core a replica is sized to keep busy."""


def mebibytes(quantity: str) -> float:
    """A Kubernetes memory quantity (``512Mi``, ``1Gi``) in MiB."""
    for suffix, factor in UNITS.items():
        if quantity.endswith(suffix):
            return float(quantity.removesuffix(suffix)) * factor / 2**20
    raise AssertionError(f"write memory as Ki, Mi or Gi, not {quantity!r}")


@pytest.fixture(scope="module")
def measured() -> dict[str, Any]:
    figures: dict[str, Any] = json.loads(MEASURED.read_text())["ours"]
    return figures


def sizing(agent_resources: Resources, rendered: dict[str, Resources]) -> dict[str, float]:
    data = find(agent_resources, "ConfigMap", "voice-agent-settings")["data"]
    server = container(find(agent_resources, "Deployment", "voice-agent"), "server")
    hpa = find(rendered["autoscaling/prometheus-adapter"], "HorizontalPodAutoscaler", "voice-agent")
    keda = find(rendered["autoscaling/keda"], "ScaledObject", "voice-agent")
    return {
        "max_calls": int(data["VOICE_AGENT_SERVER__MAX_CALLS"]),
        "limit_mib": mebibytes(server["resources"]["limits"]["memory"]),
        "request_mib": mebibytes(server["resources"]["requests"]["memory"]),
        "hpa_target": int(hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"]),
        "keda_target": int(keda["spec"]["triggers"][0]["metadata"]["threshold"]),
    }


def test_a_full_replica_fits_its_memory_limit(
    agent_resources: Resources, rendered: dict[str, Resources], measured: dict[str, Any]
) -> None:
    """The server's own RSS with its shared models loaded, plus the working memory that comes
    and goes (a Smart Turn run in flight), plus the call limit times the measured RAM per
    call, stays under the memory limit (else the kernel kills a full pod and every call on
    it)."""
    size = sizing(agent_resources, rendered)
    full = (
        measured["rss_base_mb"]
        + measured["transient_mb"]
        + size["max_calls"] * measured["ram_per_call_mb"]
    )
    assert full <= size["limit_mib"], (
        f"{size['max_calls']} calls x {measured['ram_per_call_mb']} MB + "
        f"{measured['rss_base_mb']} MB + {measured['transient_mb']} MB transient = "
        f"{full:.0f} MB > limit {size['limit_mib']:.0f} Mi"
    )


def test_the_call_limit_keeps_one_core_below_80_percent(
    agent_resources: Resources, rendered: dict[str, Resources], measured: dict[str, Any]
) -> None:
    """A replica (one core) takes no more calls than keep its core 80 % busy at the CPU per
    call measured where the bench held (the unloaded 2026-12-02 run held p95 within 1.2x up
    to 78 % busy), and the autoscalers add a replica before one is full, at a load whose
    memory the pod requests."""
    size = sizing(agent_resources, rendered)
    assert measured["highest_n_held"] >= 1
    assert 1 <= size["max_calls"] <= CORE_SHARE / measured["cpu_s_per_call_s"]
    assert size["hpa_target"] == size["keda_target"] < size["max_calls"]
    at_target = (
        measured["rss_base_mb"]
        + measured["transient_mb"]
        + size["hpa_target"] * measured["ram_per_call_mb"]
    )
    assert at_target <= size["request_mib"]
