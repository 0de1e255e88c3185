"""``voice-agent drain``, the preStop hook: it starts a real server's drain and returns only
once that server has exited, so the kubelet's own SIGTERM (a second signal: "stop at once")
never cuts a call short."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.agent.test_drain import Line, vllm_profile_server, wait_active
from tests.agent.test_serve import ROOT, Serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def serve(tmp_path: Path, asr_server_url: str) -> Iterator[Serve]:
    with vllm_profile_server(tmp_path, asr_server_url, drain_timeout_s=30) as process:
        yield process


def drain_now(*args: str, timeout_s: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "drain", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


async def drain(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent.cli", "drain", *args, cwd=ROOT, stderr=subprocess.PIPE
    )


async def test_drain_settles_then_waits_for_the_calls_in_progress_and_the_servers_exit(
    serve: Serve,
) -> None:
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{serve.port}") as http:
        first = await Line.dial(serve.port, "1")
        await wait_active(http, 1)
        pid, port = str(serve.process.pid), str(serve.port)
        hook = await drain("--pid", pid, "--port", port, "--settle", "2")
        late = await Line.dial(serve.port, "2")  # sent by a balancer that has not yet heard
        await wait_active(http, 2)  # taken, not refused
        assert (await http.get("/readyz")).json()["status"] != "draining"
        for _ in range(200):
            ready = await http.get("/readyz")
            if ready.json()["status"] == "draining":
                break
            await asyncio.sleep(0.05)
        assert ready.json()["status"] == "draining"
        await asyncio.sleep(1.0)
        assert hook.returncode is None, "the hook returned while calls were in progress"
        assert not first.closed and not late.closed  # the calls go on
        await first.hang_up()
        await late.hang_up()
        _, stderr = await asyncio.wait_for(hook.communicate(), 30)
    assert hook.returncode == 0, stderr.decode()
    assert "has exited" in stderr.decode()
    assert serve.process.poll() == 0, serve.text()  # exited by itself, cleanly
    assert "drained in" in serve.text()


def test_drain_of_a_process_that_is_gone_is_done() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    hook = drain_now("--pid", str(gone.pid))
    assert hook.returncode == 0
    assert "nothing to drain" in hook.stderr


def test_drain_gives_up_with_exit_1_when_the_process_outlives_the_timeout() -> None:
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert stubborn.stdout is not None and stubborn.stdout.readline() == b"ready\n"
        hook = drain_now("--pid", str(stubborn.pid), "--timeout", "0.5")
        assert hook.returncode == 1
        assert "still runs after 0.5 s" in hook.stderr
    finally:
        stubborn.kill()
        stubborn.wait()


def test_bad_arguments_are_refused_with_exit_2() -> None:
    for bad in (["--timeout", "0"], ["--settle", "10", "--timeout", "5"], ["--pid", "0"]):
        hook = drain_now(*bad)
        assert hook.returncode == 2, bad
        assert "--timeout" in hook.stderr
