"""The deployment files as the tests see them: rendered by ``kubectl kustomize``, parsed.

The policy and schema tools (checkov, kubernetes-validate) have dependencies that clash with
the project's, so ``scripts/setup.sh`` installs them into a venv of their own,
``.venv-tools``, and the tests run them as programs.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
KUSTOMIZATIONS = ("agent", "vllm", "autoscaling/prometheus-adapter", "autoscaling/keda")
"""Every kustomization a user applies, each on its own (the two autoscalers are alternatives)."""
SECRET_EXAMPLE = KUBERNETES / "agent" / "secret.example.yaml"
AGENT_DOCKERFILE = DEPLOY / "agent.Dockerfile"
GPU_DOCKERFILE = ROOT / "container" / "Dockerfile"
TOOLS = ROOT / ".venv-tools" / "bin"


def tool(name: str) -> Path:
    """A program of the tools venv; a clear failure (never a skip) when it is missing."""
    path = TOOLS / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/setup.sh (it builds .venv-tools)")
    return path


def kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail(
            "kubectl is missing: run scripts/setup.sh as root (it installs Debian's "
            "kubernetes-client), or install kubectl"
        )
    return path


def render(kustomization: str) -> str:
    """``kubectl kustomize deploy/kubernetes/<kustomization>``: the YAML a user applies."""
    result = subprocess.run(
        [kubectl(), "kustomize", str(KUBERNETES / kustomization)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, f"{kustomization} does not render:\n{result.stderr}"
    return result.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def find(resources: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == name)


def ingress_paths(ingress: dict[str, Any]) -> list[tuple[str, str]]:
    """``(path, pathType)`` of every rule of an Ingress."""
    return [
        (path["path"], path["pathType"])
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    ]


def ingress_routes(paths: list[tuple[str, str]], request_path: str) -> bool:
    """Whether a request for ``request_path`` matches one of ``paths`` (Kubernetes rules:
    Exact is the whole path, Prefix matches whole path elements)."""
    for path, kind in paths:
        if kind == "Exact" and request_path == path:
            return True
        if kind == "Prefix":
            prefix = path.rstrip("/")
            if request_path == prefix or request_path.startswith(prefix + "/") or prefix == "":
                return True
    return False
