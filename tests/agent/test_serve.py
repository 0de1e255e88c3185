"""``voice-agent serve`` as a user runs it: a real process with real child servers."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import requires_local_llm, requires_modules
from tests.fakes.serving import free_port

ROOT = Path(__file__).resolve().parents[2]

requires_offline_stack = requires_modules(
    "faster_whisper",
    "piper",
    "flask",
    install="the default profile needs the offline extra: scripts/setup.sh",
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


class Serve:
    def __init__(
        self,
        tmp_path: Path,
        *args: str,
        env: dict[str, str] | None = None,
        own_group: bool = False,
    ) -> None:
        self.port = free_port()
        self.log = tmp_path / "serve.log"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "agent.cli", "serve", "--port", str(self.port), *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=own_group,  # like a terminal's foreground job
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"serve exited {self.process.returncode}:\n{self.text()}")
            try:
                url = f"http://127.0.0.1:{self.port}/healthz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"serve never answered /healthz:\n{self.text()}")

    def child_pids(self) -> dict[str, int]:
        return {
            name: int(pid) for name, pid in re.findall(r"started (\S+) \(pid (\d+)\)", self.text())
        }

    def wait(self, timeout_s: float = 30.0) -> int:
        return self.process.wait(timeout=timeout_s)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def offline_env() -> dict[str, str]:
    asr_port, tts_port, llm_port = free_port(), free_port(), free_port()
    return {
        "VOICE_AGENT_ASR_SERVER__PORT": str(asr_port),
        "VOICE_AGENT_LLM__LOCAL__PORT": str(llm_port),
        "VOICE_AGENT_STT__URL": f"ws://127.0.0.1:{asr_port}/v1/realtime",
        "VOICE_AGENT_TTS__BASE_URL": f"http://127.0.0.1:{tts_port}",
        "HF_HUB_OFFLINE": "1",
    }


@pytest.fixture
def serves() -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for serve in started:
        serve.kill()


@requires_offline_stack
@requires_local_llm
def test_default_profile_starts_children_and_stops_them_on_sigterm(
    tmp_path: Path, offline_env: dict[str, str], serves: list[Serve]
) -> None:
    serve = Serve(tmp_path, env=offline_env)
    serves.append(serve)
    serve.wait_healthy()
    children = serve.child_pids()
    assert set(children) == {"asr-server", "piper-tts", "local-llm"}
    assert all(alive(pid) for pid in children.values())
    serve.process.send_signal(signal.SIGTERM)
    assert serve.wait() == 0, serve.text()
    assert not any(alive(pid) for pid in children.values())


@requires_offline_stack
def test_ctrl_c_in_a_terminal_is_a_clean_shutdown_not_a_child_crash(
    tmp_path: Path, offline_env: dict[str, str], serves: list[Serve]
) -> None:
    serve = Serve(tmp_path, env=offline_env, own_group=True)
    serves.append(serve)
    serve.wait_healthy()
    children = serve.child_pids()
    os.killpg(serve.process.pid, signal.SIGINT)  # what Ctrl-C does: the whole process group
    assert serve.wait() == 0, serve.text()
    assert "exited with code" not in serve.text()
    assert not any(alive(pid) for pid in children.values())


@requires_offline_stack
@requires_local_llm
def test_a_dead_child_is_restarted_and_the_server_stays_up(
    tmp_path: Path, offline_env: dict[str, str], serves: list[Serve]
) -> None:
    victim = "local-llm"  # the same supervisor restarts the ASR and Piper servers
    serve = Serve(tmp_path, env=offline_env)
    serves.append(serve)
    serve.wait_healthy()
    children = serve.child_pids()
    os.kill(children[victim], signal.SIGKILL)
    deadline = time.monotonic() + 90
    while f"{victim} is back" not in serve.text():
        assert serve.process.poll() is None, serve.text()
        assert time.monotonic() < deadline, serve.text()
        time.sleep(0.2)
    assert re.search(rf"{victim} \(pid \d+\) exited with code -9; restarting it", serve.text())
    restarted = serve.child_pids()[victim]
    others = [pid for name, pid in children.items() if name != victim]
    assert restarted != children[victim] and alive(restarted)
    assert all(alive(pid) for pid in others)
    serve.wait_healthy()
    serve.process.send_signal(signal.SIGTERM)
    assert serve.wait() == 0, serve.text()
    assert not alive(restarted) and not any(alive(pid) for pid in others)


@requires_offline_stack
def test_without_llama_cpp_serve_says_so_and_the_echo_responder_answers(
    tmp_path: Path, offline_env: dict[str, str], serves: list[Serve]
) -> None:
    hide = tmp_path / "no_llama_cpp"
    hide.mkdir()
    # The way Python hides a module: None in sys.modules (import fails, find_spec is None).
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['llama_cpp'] = None\n")
    pythonpath = os.pathsep.join(filter(None, [str(hide), os.environ.get("PYTHONPATH")]))
    serve = Serve(tmp_path, env={**offline_env, "PYTHONPATH": pythonpath})
    serves.append(serve)
    serve.wait_healthy()
    lines = [line for line in serve.text().splitlines() if "llama_cpp" in line]
    assert len(lines) == 1 and "answering with the echo responder" in lines[0], serve.text()
    assert set(serve.child_pids()) == {"asr-server", "piper-tts"}
    url = f"http://127.0.0.1:{serve.port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            ready = json.load(response)
    except urllib.error.HTTPError as exc:  # 503 if another part is down: its body says which
        ready = json.load(exc)
    assert ready["components"]["llm"]["ok"], ready
    assert ready["components"]["llm"]["detail"].startswith("echo"), ready
    serve.process.send_signal(signal.SIGTERM)
    assert serve.wait() == 0, serve.text()


def test_vllm_profile_starts_nothing_local(tmp_path: Path, serves: list[Serve]) -> None:
    serve = Serve(tmp_path, "--profile", "vllm")
    serves.append(serve)
    serve.wait_healthy()
    assert serve.child_pids() == {}
    serve.process.send_signal(signal.SIGINT)
    assert serve.wait() == 0, serve.text()


def test_bad_profile_is_a_config_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", "serve", "--profile", "nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown profile 'nope'" in result.stderr


def test_the_server_runs_on_uvloop_as_the_capacity_bench_measures_it() -> None:
    from agent.serve import event_loop_factory

    factory = event_loop_factory()
    assert factory is not None, "uvloop is missing: install uvicorn[standard]"
    loop = factory()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_unsigned_phone_calls_beyond_this_machine_are_refused_at_start() -> None:
    """Without twilio.auth_token anyone can start calls: on loopback that is the offline
    profile's way; on an address others reach, serve refuses unless the operator says so."""
    env = {**os.environ, "VOICE_AGENT_PROFILE": "vllm"}
    env.pop("VOICE_AGENT_TWILIO__AUTH_TOKEN", None)
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", "serve", "--host", "0.0.0.0", "--port", "9"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "twilio.auth_token" in result.stderr and "ALLOW_UNSIGNED" in result.stderr


@pytest.mark.parametrize(
    ("host", "token", "allow", "starts"),
    [
        ("127.0.0.1", None, False, True),
        ("::1", None, False, True),
        ("localhost", None, False, True),
        ("0.0.0.0", None, False, False),
        ("10.0.0.5", None, False, False),
        ("agent.example", None, False, False),
        ("0.0.0.0", "secret", False, True),
        ("0.0.0.0", None, True, True),
    ],
)
def test_only_loopback_a_token_or_an_explicit_opt_in_serves_phone_calls(
    host: str, token: str | None, allow: bool, starts: bool
) -> None:
    from agent.config import ConfigError, load_settings
    from agent.serve import check_twilio_auth

    settings = load_settings(
        "vllm",
        overrides={
            "server": {"host": host},
            "twilio": {"auth_token": token, "allow_unsigned": allow},
        },
    )
    if starts:
        check_twilio_auth(settings)
    else:
        with pytest.raises(ConfigError, match="ALLOW_UNSIGNED"):
            check_twilio_auth(settings)
