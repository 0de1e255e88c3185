"""The real ``sagemaker-entrypoint.sh``, run with a stand-in ``vllm`` and the real bridge.

Each test starts the script in its own process group on free loopback ports and kills the
whole group in teardown, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.stt.protocol import VOXTRAL_MODEL
from tests.fakes.serving import free_port

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "container" / "sagemaker-entrypoint.sh"
STAND_IN = Path(__file__).resolve().parent / "stand_in_vllm.py"

pytestmark = pytest.mark.timeout(90)

VOXTRAL_FLAGS = [
    "--tokenizer-mode", "mistral",
    "--config-format", "mistral",
    "--load-format", "mistral",
    "--compilation-config", '{"cudagraph_mode":"PIECEWISE"}',
]  # fmt: skip


def wait_for(predicate: Callable[[], object], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def http_status(url: str) -> int | None:
    """The status of ``GET url``; None when nothing listens."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Entrypoint:
    proc: subprocess.Popen[bytes]
    log_path: Path
    state: Path
    vllm_port: int
    bridge_port: int

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def recorded(self) -> dict[str, object]:
        path = self.state / "argv.json"
        wait_for(path.exists, "the stand-in vllm to start")
        data: dict[str, object] = json.loads(path.read_text())
        return data

    def vllm_pid(self) -> int:
        path = self.state / "pid"
        wait_for(path.exists, "the stand-in vllm's pid")
        return int(path.read_text())

    def health_requests(self) -> list[str]:
        path = self.state / "health.log"
        return path.read_text().split() if path.exists() else []

    def bridge_started(self) -> bool:
        """From the entrypoint's own log, not the port: on a busy machine another process
        may take the free port this test picked for the bridge."""
        return "bridge started" in self.log()

    def ping(self) -> int | None:
        return http_status(f"http://127.0.0.1:{self.bridge_port}/ping")

    def wait_exit(self, timeout_s: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the entrypoint did not exit:\n{self.log()}") from None

    def log_line(self, fragment: str) -> str:
        lines = [line for line in self.log().splitlines() if fragment in line]
        assert lines, f"no log line with {fragment!r} in:\n{self.log()}"
        return lines[0]


@pytest.fixture
def start_entrypoint(tmp_path: Path) -> Iterator[Callable[..., Entrypoint]]:
    vllm_bin = tmp_path / "bin" / "vllm"
    vllm_bin.parent.mkdir()
    vllm_bin.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{STAND_IN}" "$@"\n')
    vllm_bin.chmod(0o755)
    started: list[Entrypoint] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Entrypoint:
        state = tmp_path / f"state{len(started)}"
        state.mkdir()
        vllm_port, bridge_port = free_port(), free_port()
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "LANG": "C.UTF-8",
            "VLLM_BIN": str(vllm_bin),
            "BRIDGE_PYTHON": sys.executable,
            "VLLM_PORT": str(vllm_port),
            "BRIDGE_HOST": "127.0.0.1",
            "BRIDGE_PORT": str(bridge_port),
            "STOP_GRACE_S": "5",
            "FAKE_VLLM_STATE_DIR": str(state),
            **(env or {}),
        }
        log_path = state / "entrypoint.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                ["bash", str(ENTRYPOINT), *args],
                env=full_env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        entry = Entrypoint(proc, log_path, state, vllm_port, bridge_port)
        started.append(entry)
        return entry

    yield start
    for entry in started:
        try:
            os.killpg(entry.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        entry.proc.wait(timeout=10)


def test_default_flags_ping_and_vllm_death(start_entrypoint: Callable[..., Entrypoint]) -> None:
    entry = start_entrypoint("serve", "--seed", "7")  # SageMaker passes `serve`
    recorded = entry.recorded()
    assert recorded["argv"] == [
        "serve", "/opt/ml/model",
        "--host", "127.0.0.1", "--port", str(entry.vllm_port),
        *VOXTRAL_FLAGS,
        "--served-model-name", VOXTRAL_MODEL,  # the container's default is the agent's
        "--max-model-len", "45000",
        "--seed", "7",
    ]  # fmt: skip
    env = recorded["env"]
    assert isinstance(env, dict)
    assert env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert env["PYTHONPATH"] is None  # the bridge's import path is not vLLM's

    wait_for(lambda: entry.ping() == 200, "/ping through the bridge to answer 200")

    os.kill(entry.vllm_pid(), signal.SIGKILL)
    code = entry.wait_exit()
    assert code != 0
    line = entry.log_line("exited with code")
    assert "vLLM" in line and "137" in line and "stopping the bridge" in line
    assert not listening(entry.bridge_port)  # the bridge was stopped too


def test_sm_vllm_variables_become_flags_and_bridge_waits_for_health(
    start_entrypoint: Callable[..., Entrypoint], tmp_path: Path
) -> None:
    ready = tmp_path / "ready"
    entry = start_entrypoint(
        env={
            "SM_VLLM_MODEL": "/models/voxtral",
            "SM_VLLM_SERVED_MODEL_NAME": "voxtral",
            "MAX_MODEL_LEN": "30000",
            "SM_VLLM_MAX_NUM_SEQS": "4",
            "SM_VLLM_GPU_MEMORY_UTILIZATION": "0.85",
            "SM_VLLM_ENFORCE_EAGER": "true",
            "SM_VLLM_DISABLE_LOG_STATS": "false",
            "SM_VLLM_COMPILATION_CONFIG": "",  # drops a default
            "SM_VLLM_LOAD_FORMAT": "auto",  # overrides a default in place
            "SM_VLLM_PORT": "9999",  # ignored: the bridge needs VLLM_PORT
            "FAKE_VLLM_READY_FILE": str(ready),
        }
    )
    assert entry.recorded()["argv"] == [
        "serve", "/models/voxtral",
        "--host", "127.0.0.1", "--port", str(entry.vllm_port),
        "--tokenizer-mode", "mistral",
        "--config-format", "mistral",
        "--load-format", "auto",
        "--served-model-name", "voxtral",
        "--max-model-len", "30000",
        "--enforce-eager",
        "--gpu-memory-utilization", "0.85",
        "--max-num-seqs", "4",
    ]  # fmt: skip
    assert "ignoring SM_VLLM_PORT" in entry.log()

    # While vLLM answers 503 the entrypoint keeps probing and the bridge is not started.
    wait_for(lambda: entry.health_requests().count("503") >= 3, "three unhealthy probes")
    assert not entry.bridge_started()
    assert "vLLM is healthy" not in entry.log()

    ready.touch()
    wait_for(lambda: entry.ping() == 200, "/ping through the bridge to answer 200")
    log = entry.log()
    assert log.index("vLLM is healthy") < log.index("bridge started")

    # SIGTERM stops both children and the entrypoint exits cleanly.
    entry.proc.send_signal(signal.SIGTERM)
    assert entry.wait_exit() == 0
    assert (entry.state / "terminated").exists()  # vLLM got SIGTERM, not SIGKILL
    assert not listening(entry.bridge_port)
    assert not listening(entry.vllm_port)
    assert "received SIGTERM" in entry.log()


def test_bridge_death_stops_vllm(start_entrypoint: Callable[..., Entrypoint]) -> None:
    entry = start_entrypoint()
    wait_for(lambda: entry.ping() == 200, "/ping through the bridge to answer 200")
    bridge_pid = int(entry.log_line("bridge started (pid").split("(pid ")[1].split(")")[0])
    os.kill(bridge_pid, signal.SIGKILL)
    assert entry.wait_exit() != 0
    line = entry.log_line("exited with code")
    assert "bridge" in line and "137" in line and "stopping vLLM" in line
    assert (entry.state / "terminated").exists()
    assert not listening(entry.vllm_port)


def test_vllm_exiting_before_health_fails_loudly(
    start_entrypoint: Callable[..., Entrypoint],
) -> None:
    entry = start_entrypoint(env={"FAKE_VLLM_EXIT_CODE": "3"})
    assert entry.wait_exit() == 3
    assert "exited with code 3 before it became healthy" in entry.log()
    assert not entry.bridge_started()


def test_health_timeout_stops_vllm_and_fails(
    start_entrypoint: Callable[..., Entrypoint], tmp_path: Path
) -> None:
    entry = start_entrypoint(
        env={"VLLM_HEALTH_TIMEOUT_S": "2", "FAKE_VLLM_READY_FILE": str(tmp_path / "never")}
    )
    assert entry.wait_exit() == 1
    assert "did not become healthy within 2s" in entry.log()
    assert (entry.state / "terminated").exists()
    assert not entry.bridge_started()


def test_bad_port_setting_is_refused(start_entrypoint: Callable[..., Entrypoint]) -> None:
    entry = start_entrypoint(env={"VLLM_PORT": "eighty"})
    assert entry.wait_exit() == 2
    assert "VLLM_PORT must be a whole number" in entry.log()
