"""``requires`` (tests/conftest.py): a missing program or module skips a test on a developer's
machine and fails it under ``CI=true``, naming what is missing and how to install it.

Each case runs pytest for real in a child process on a small test file that uses the helper,
once with ``CI=true`` and once without.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = textwrap.dedent(
    """
    from tests.conftest import requires, requires_modules

    @requires("no-such-tool-for-ci", "no-such-package")
    def test_program():
        pass

    @requires("true", "coreutils", probe=("false",), needs="the probe to pass")
    def test_probe():
        pass

    @requires_modules("no_such_module_for_ci", install="pip install no-such-module")
    def test_module():
        pass

    @requires("true", "coreutils", probe=("true",))
    def test_present():
        pass
    """
)


def run_pytest(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_cases.py").write_text(CASES)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"PYTHONPATH": str(ROOT)}
    if ci is not None:
        env["CI"] = ci
    command = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    command += ["-p", "tests.conftest", "-c", os.devnull, "--rootdir", str(tmp_path)]
    command += ["-W", "ignore::DeprecationWarning"]  # as pyproject.toml has it: Pipecat's
    return subprocess.run(
        [*command, str(tmp_path / "test_cases.py")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_without_ci_a_missing_requirement_skips(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, ci=None)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed, 3 skipped" in done.stdout, done.stdout
    assert "no-such-tool-for-ci is not installed (apt-get install no-such-package" in done.stdout


def test_under_ci_a_missing_requirement_fails_and_says_what_to_install(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, ci="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed, 3 errors" in done.stdout, done.stdout
    assert "skipped" not in done.stdout
    for said in (
        "CI=true: a test may not skip here: no-such-tool-for-ci is not installed "
        "(apt-get install no-such-package",
        "`false` failed: this machine does not allow the probe to pass (package coreutils",
        "no_such_module_for_ci not importable (pip install no-such-module)",
    ):
        assert said in done.stdout, done.stdout
