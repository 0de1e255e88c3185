"""The Kubernetes manifests: they render, validate against the Kubernetes schemas, and say
the same things as the code they deploy (settings, probes, drain, metrics, vLLM flags)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.calls import CallRegistry
from agent.config import ENV_PREFIX, Settings, load_settings
from agent.drain import DEFAULT_TIMEOUT_S
from agent.observability.metrics import AgentMetrics
from tests.deploy.manifests import (
    AGENT_DOCKERFILE,
    ROOT,
    SECRET_EXAMPLE,
    container,
    documents,
    find,
    ingress_paths,
    ingress_routes,
    tool,
)

Resources = list[dict[str, Any]]


def test_every_rendered_manifest_and_the_secret_example_validate_against_kubernetes_schemas(
    rendered_files: dict[str, Path], rendered: dict[str, Resources]
) -> None:
    files = [str(p) for p in rendered_files.values()] + [str(SECRET_EXAMPLE)]
    result = subprocess.run(
        [str(tool("kubernetes-validate")), "--strict", *files],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.findall(r"passed for resource (\S+)", result.stdout + result.stderr)
    # Every resource but KEDA's ScaledObjects (a CRD: checked below) was checked, not skipped.
    built_in = [r for docs in rendered.values() for r in docs if r["kind"] != "ScaledObject"]
    assert len(passed) == len(built_in) + 1, result.stdout + result.stderr


def test_keda_scaled_objects_have_what_kedas_crd_requires(rendered: dict[str, Resources]) -> None:
    """KEDA's CRD (keda.sh/v1alpha1): scaleTargetRef.name and triggers[].type and .metadata
    are required, and trigger metadata is a map of strings (a number there is refused)."""
    objects = rendered["autoscaling/keda"]
    assert {o["kind"] for o in objects} == {"ScaledObject"}
    known = {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "pollingInterval",
             "cooldownPeriod", "advanced", "triggers", "fallback", "idleReplicaCount"}  # fmt: skip
    for obj in objects:
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert set(spec) <= known, set(spec) - known
        assert spec["scaleTargetRef"]["name"]
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        for trigger in spec["triggers"]:
            assert trigger["type"] == "prometheus"
            assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger
            assert {"serverAddress", "query", "threshold"} <= set(trigger["metadata"])


def test_the_configmap_is_settings_the_server_accepts(
    agent_resources: Resources, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loaded as the pod gets it (env), through agent.config: a typo fails here."""
    data = find(agent_resources, "ConfigMap", "voice-agent-settings")["data"]
    secret = yaml.safe_load(SECRET_EXAMPLE.read_text())["stringData"]
    for key in [k for k in os.environ if k.startswith(ENV_PREFIX)]:
        monkeypatch.delenv(key)
    for key, value in {**data, **secret}.items():
        assert key.startswith(ENV_PREFIX), f"{key}: not a setting"
        top = key.removeprefix(ENV_PREFIX).split("__")[0].lower()
        assert top in Settings.model_fields, f"{key}: no setting {top!r}"
        monkeypatch.setenv(key, value)
    settings = load_settings()
    assert settings.profile == "vllm"
    assert settings.server.host == "0.0.0.0" and not settings.server.start_local_services
    assert settings.server.max_calls == int(data["VOICE_AGENT_SERVER__MAX_CALLS"])  # sized:
    # tests/deploy/test_sizing.py
    assert settings.twilio.auth_token and settings.llm.api_key
    turn = settings.server.ice_servers[0]
    assert turn.shared_secret and not turn.credential  # time-limited TURN credentials


def test_stt_url_points_at_the_vllm_service(
    agent_resources: Resources, rendered: dict[str, Resources]
) -> None:
    url = find(agent_resources, "ConfigMap", "voice-agent-settings")["data"]["VOICE_AGENT_STT__URL"]
    service = find(rendered["vllm"], "Service", "voxtral-vllm")
    port = service["spec"]["ports"][0]["port"]
    namespace = service["metadata"]["namespace"]
    assert url == f"ws://voxtral-vllm.{namespace}.svc.cluster.local:{port}/v1/realtime"


def test_probes_drain_and_grace_period_fit_together(agent_resources: Resources) -> None:
    deployment = find(agent_resources, "Deployment", "voice-agent")
    server = container(deployment, "server")
    data = find(agent_resources, "ConfigMap", "voice-agent-settings")["data"]
    drain_timeout = float(data["VOICE_AGENT_SERVER__DRAIN_TIMEOUT_S"])
    hook = server["lifecycle"]["preStop"]["exec"]["command"]
    assert hook[:2] == ["voice-agent", "drain"]
    hook_timeout = float(hook[hook.index("--timeout") + 1])
    settle = float(hook[hook.index("--settle") + 1])
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    # Calls still taken while the ingress hears of it (settle), then the drain: the server
    # closes what is left at drain_timeout; the hook waits for its exit; SIGKILL comes last.
    assert settle > 0
    assert settle + drain_timeout + 10 <= hook_timeout < grace
    assert hook_timeout <= DEFAULT_TIMEOUT_S
    assert hook[hook.index("--port") + 1] == data["VOICE_AGENT_SERVER__PORT"]
    assert server["ports"][0]["containerPort"] == int(data["VOICE_AGENT_SERVER__PORT"])
    assert server["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert server["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_the_ingress_keeps_webrtc_sessions_on_their_replica_and_websockets_open(
    agent_resources: Resources,
) -> None:
    notes = find(agent_resources, "Ingress", "voice-agent")["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    assert notes[prefix + "affinity"] == "cookie"
    assert notes[prefix + "affinity-mode"] == "persistent"
    assert notes[prefix + "session-cookie-name"]
    assert int(notes[prefix + "proxy-read-timeout"]) >= 3600
    assert int(notes[prefix + "proxy-send-timeout"]) >= 3600


def test_autoscalers_query_the_metric_the_server_exports(rendered: dict[str, Resources]) -> None:
    exported = AgentMetrics(calls=CallRegistry(max_calls=1)).exposition().decode()
    assert re.search(r"^voice_agent_active_calls \d", exported, re.M), exported[:2000]
    data = find(rendered["agent"], "ConfigMap", "voice-agent-settings")["data"]
    agent_max = int(data["VOICE_AGENT_SERVER__MAX_CALLS"])
    hpa = find(rendered["autoscaling/prometheus-adapter"], "HorizontalPodAutoscaler", "voice-agent")
    pods_metric = hpa["spec"]["metrics"][0]["pods"]
    assert pods_metric["metric"]["name"] == "voice_agent_active_calls"
    target = int(pods_metric["target"]["averageValue"])
    rules = yaml.safe_load(
        find(rendered["autoscaling/prometheus-adapter"], "ConfigMap", "prometheus-adapter")["data"][
            "config.yaml"
        ]
    )["rules"]
    assert any("voice_agent_active_calls" in rule["seriesQuery"] for rule in rules)
    keda = find(rendered["autoscaling/keda"], "ScaledObject", "voice-agent")
    trigger = keda["spec"]["triggers"][0]["metadata"]
    assert trigger["query"] == 'sum(voice_agent_active_calls{namespace="voice-agent"})'
    # Both scale before a replica is full, and on the same figure.
    assert int(trigger["threshold"]) == target < agent_max


def test_vllm_runs_voxtral_with_the_flags_of_the_sagemaker_entrypoint(
    rendered: dict[str, Resources],
) -> None:
    script = (ROOT / "container" / "sagemaker-entrypoint.sh").read_text()
    block = script[script.index("declare -A option=(") : script.index("\norder=(")]
    defaults = dict(re.findall(r"\[([a-z-]+)\]=(\S+)", block))
    defaults["compilation-config"] = defaults["compilation-config"].strip("'")
    defaults["max-model-len"] = "45000"  # ${MAX_MODEL_LEN:-45000}
    vllm = container(find(rendered["vllm"], "Deployment", "voxtral-vllm"), "vllm")
    args = vllm["args"]
    assert args[:2] == ["serve", defaults["served-model-name"]]
    flags = dict(arg[2:].split("=", 1) for arg in args[2:])
    for flag, value in defaults.items():
        assert flags.get(flag) == value, f"--{flag}: {flags.get(flag)!r}, entrypoint {value!r}"
    assert flags["max-num-seqs"] == "4"  # agent/deploy.py's default, the sizing below uses it
    env = {e["name"]: e.get("value") for e in vllm["env"]}
    assert env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert vllm["readinessProbe"]["httpGet"]["path"] == "/health"
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == "1"


def test_the_agent_dockerfile_runs_the_server_as_a_user_with_everything_it_copies() -> None:
    """Checked as text: no Docker engine runs here."""
    lines = [
        line.strip()
        for line in AGENT_DOCKERFILE.read_text().replace("\\\n", " ").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    steps = [(line.split()[0], line.split(None, 1)[1]) for line in lines]
    for keyword, rest in steps:
        if keyword == "COPY":
            for source in rest.split()[:-1]:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"
    users = [rest for keyword, rest in steps if keyword == "USER"]
    assert users and not users[-1].startswith(("0", "root"))
    assert steps[-1] == ("CMD", '["serve", "--host", "0.0.0.0"]')
    assert ("ENTRYPOINT", '["voice-agent"]') in steps
    healthcheck = next(rest for keyword, rest in steps if keyword == "HEALTHCHECK")
    assert "/healthz" in healthcheck
    install = next(rest for keyword, rest in steps if keyword == "RUN" and "pip install" in rest)
    extras = re.search(r"\.\[([a-z,]+)\]", install)
    assert extras is not None
    pyproject = (ROOT / "pyproject.toml").read_text()
    for extra in extras.group(1).split(","):
        assert re.search(rf"^{extra} = \[", pyproject, re.M), f"no extra {extra!r}"
    env = " ".join(rest for keyword, rest in steps if keyword == "ENV")
    assert "HF_HUB_OFFLINE=1" in env  # nothing downloads weights at run time


def test_the_secret_is_not_applied_with_the_manifests(agent_resources: Resources) -> None:
    assert not [r for r in agent_resources if r["kind"] == "Secret"]
    assert documents(SECRET_EXAMPLE.read_text())[0]["kind"] == "Secret"


def test_the_ingress_routes_what_callers_use_and_keeps_operator_routes_inside(
    agent_resources: Resources,
) -> None:
    from agent.server import create_app

    routes = route_paths(create_app(load_settings("vllm")).routes)
    paths = ingress_paths(find(agent_resources, "Ingress", "voice-agent"))
    callers = {"/start", "/api/offer", "/sessions/{session_id}/api/offer", "/telephony/twilio",
               "/telephony/twilio/ws", "/", "/client", "/client/", "/playground"}  # fmt: skip
    inside = {"/metrics", "/calls", "/calls/{call_id}", "/healthz", "/readyz",
              "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}  # fmt: skip
    callers |= {r for r in routes if r.startswith("/telephony/")}  # carriers call these
    inside |= {r for r in routes if r.startswith("/calls/")}  # the operator API
    inside |= {r for r in routes if r.startswith("/interpreter/")}  # operator-made sessions
    unsorted = routes - callers - inside
    assert not unsorted, f"new routes {unsorted}: say whether the Ingress should carry them"
    assert callers | inside <= routes, (callers | inside) - routes
    for route in callers:
        assert ingress_routes(paths, route), f"{route}: callers cannot reach it"
    for route in inside:
        assert not ingress_routes(paths, route), f"{route}: open to the internet"


def route_paths(routes: list[Any]) -> set[str]:
    """Every path the app serves, through included routers."""
    paths: set[str] = set()
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            paths |= route_paths(included.routes)
        elif getattr(route, "path", None):
            paths.add(route.path)
    return paths
