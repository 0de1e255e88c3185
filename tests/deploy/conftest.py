"""Session-wide: every kustomization rendered once, the policy scan run once (checkov takes
seconds to start; one run covers every file)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import (
    AGENT_DOCKERFILE,
    GPU_DOCKERFILE,
    KUSTOMIZATIONS,
    SECRET_EXAMPLE,
    documents,
    render,
    tool,
)


@pytest.fixture(scope="session")
def rendered_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each kustomization's rendered YAML, in a file (the tools read files)."""
    out = tmp_path_factory.mktemp("rendered")
    files = {}
    for name in KUSTOMIZATIONS:
        path = out / (name.replace("/", "-") + ".yaml")
        path.write_text(render(name))
        files[name] = path
    return files


@pytest.fixture(scope="session")
def rendered(rendered_files: dict[str, Path]) -> dict[str, list[dict[str, Any]]]:
    return {name: documents(path.read_text()) for name, path in rendered_files.items()}


@pytest.fixture(scope="session")
def agent_resources(rendered: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return rendered["agent"]


@pytest.fixture(scope="session")
def checkov_reports(rendered_files: dict[str, Path]) -> list[dict[str, Any]]:
    """checkov's JSON reports for the rendered manifests, the Secret example and both
    Dockerfiles (kubernetes and dockerfile frameworks), offline."""
    files = [*rendered_files.values(), SECRET_EXAMPLE, AGENT_DOCKERFILE, GPU_DOCKERFILE]
    args = [str(tool("checkov")), "--framework", "kubernetes", "dockerfile", "--output", "json"]
    args += ["--skip-download"]  # no policy download, no platform: offline
    for path in files:
        args += ["--file", str(path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.stdout.strip(), f"checkov printed nothing:\n{result.stderr[-3000:]}"
    parsed = json.loads(result.stdout)
    reports: list[dict[str, Any]] = parsed if isinstance(parsed, list) else [parsed]
    return reports
