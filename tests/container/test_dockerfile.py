"""The container image's recipe, checked as text (no Docker engine runs here).

What SageMaker needs from the image (the bidirectional-streaming label, port 8080, an
entrypoint that exists), that the base image is a build argument, that everything copied
exists, and that the bridge in the image runs with exactly what ``requirements.txt`` pins.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from agent.stt.protocol import VOXTRAL_MODEL

ROOT = Path(__file__).resolve().parents[2]
CONTAINER = ROOT / "container"


def instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` pairs, continuation lines joined, comments dropped."""
    logical: list[str] = []
    pending = ""
    for raw in (CONTAINER / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    result = []
    for line in logical:
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def arguments(keyword: str) -> list[str]:
    return [rest for kw, rest in instructions() if kw == keyword]


def env_values() -> dict[str, str]:
    values: dict[str, str] = {}
    for rest in arguments("ENV"):
        for match in re.finditer(r"(\w+)=(\S+)", rest):
            values[match.group(1)] = match.group(2)
    return values


def requirements() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (CONTAINER / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep, f"requirement not pinned with ==: {line}"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_base_image_is_a_build_argument_used_by_from() -> None:
    steps = instructions()
    assert steps[0][0] == "ARG", "ARG BASE_IMAGE must come before FROM"
    name, _, default = steps[0][1].partition("=")
    assert name == "BASE_IMAGE"
    assert default.startswith("763104351884.dkr.ecr.") and "/vllm:" in default
    assert "sagemaker" in default
    assert arguments("FROM") == ["${BASE_IMAGE}"]


def test_sagemaker_contract_label_port_health_and_entrypoint() -> None:
    labels = " ".join(arguments("LABEL"))
    assert "com.amazonaws.sagemaker.capabilities.bidirectional-streaming=true" in labels
    assert arguments("EXPOSE") == ["8080"]
    (healthcheck,) = arguments("HEALTHCHECK")
    assert "127.0.0.1:8080/ping" in healthcheck
    (entrypoint,) = arguments("ENTRYPOINT")
    command = json.loads(entrypoint)  # exec form: the script is PID 1 and gets SIGTERM
    assert command == ["/opt/voxtral/sagemaker-entrypoint.sh"]
    copied = {rest.split()[-1] for rest in arguments("COPY")}
    assert command[0] in copied
    assert env_values()["BRIDGE_PORT"] == "8080"


def test_every_copied_source_exists() -> None:
    for rest in arguments("COPY"):
        parts = [p for p in rest.split() if not p.startswith("--")]
        for source in parts[:-1]:
            assert (CONTAINER / source).exists(), f"COPY source missing: container/{source}"
    assert os.access(CONTAINER / "sagemaker-entrypoint.sh", os.X_OK)


def test_bridge_import_path_holds_the_copied_bridge() -> None:
    env = env_values()
    copied_to = {rest.split()[-1].rstrip("/") for rest in arguments("COPY")}
    assert "/opt/voxtral/bridge" in copied_to
    path = env["BRIDGE_PYTHONPATH"].split(":")
    assert "/opt/voxtral" in path
    assert any("--target /opt/voxtral/lib" in run for run in arguments("RUN"))
    assert "/opt/voxtral/lib" in path


def test_served_model_name_matches_the_sagemaker_profile() -> None:
    """The image serves under the name the agent's sagemaker profile asks for."""
    from agent.config import load_settings

    served = env_values()["SM_VLLM_SERVED_MODEL_NAME"]
    assert served == load_settings("sagemaker").stt.model == VOXTRAL_MODEL


def test_requirements_are_pinned_to_what_the_tests_run() -> None:
    for name, version in requirements().items():
        assert metadata.version(name) == version, f"{name}: tests run {metadata.version(name)}"


def test_bridge_imports_only_what_requirements_pin() -> None:
    module_to_dist = {"prometheus_client": "prometheus-client"}
    pinned = set(requirements())
    for path in (CONTAINER / "bridge").glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "__future__":
                    continue
                dist = module_to_dist.get(top, top)
                assert dist in pinned, f"{path.name} imports {top}, not in requirements.txt"


@pytest.mark.timeout(60)
def test_bridge_runs_without_the_agent_package(tmp_path: Path) -> None:
    """As in the image: only container/ on the path, the bridge imports and builds its app."""
    probe = (
        "import sys\n"
        "import bridge.app\n"
        "bridge.app.create_app()\n"
        "leaked = sorted(m for m in sys.modules if m == 'agent' or m.startswith('agent.'))\n"
        "assert not leaked, leaked\n"
    )
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(CONTAINER)}
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
