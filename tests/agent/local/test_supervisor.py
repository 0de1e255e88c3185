"""The supervisor runs real child processes: ready checks, a dying child, stopping all."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap

import pytest

from agent.local.supervisor import ChildFailed, ChildSpec, Supervisor
from tests.fakes.serving import free_port

# A tiny HTTP server that answers 200 on /health after an optional delay, then optionally
# exits with a given code a while after it was first found ready (counted from then, not from
# its start: on a loaded machine the supervisor's first check may come later than that
# while), or ignores SIGTERM.
CHILD = textwrap.dedent(
    """
    import http.server, os, signal, sys, threading, time
    port, delay, die_after = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    stubborn = sys.argv[4] == "1"
    if stubborn:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(delay)
    dying = []
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
            if die_after >= 0 and not dying:
                dying.append(threading.Timer(die_after, lambda: os._exit(3)))
                dying[0].start()
        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    server.serve_forever()
    """
)


def child(
    name: str,
    *,
    delay: float = 0.0,
    die_after: float = -1.0,
    stubborn: bool = False,
    ready_timeout_s: float = 20.0,
) -> ChildSpec:
    port = free_port()
    return ChildSpec(
        name=name,
        argv=[
            sys.executable,
            "-c",
            CHILD,
            str(port),
            str(delay),
            str(die_after),
            str(int(stubborn)),
        ],
        ready_url=f"http://127.0.0.1:{port}/health",
        ready_timeout_s=ready_timeout_s,
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still "exists"; the supervisor reaps, so a reaped child is gone for good.
    return True


async def test_starts_children_waits_until_ready_and_stops_them() -> None:
    supervisor = Supervisor([child("one", delay=0.3), child("two")])
    async with supervisor:
        pids = supervisor.pids
        assert set(pids) == {"one", "two"}
        assert all(alive(pid) for pid in pids.values())
    assert not any(alive(pid) for pid in pids.values())
    assert supervisor.pids == {}


async def test_a_child_that_dies_is_restarted_and_ready_again() -> None:
    supervisor = Supervisor([child("steady"), child("fragile")], restart_backoff_s=(0.1, 0.2))
    async with supervisor:
        first = supervisor.pids["fragile"]
        watch = asyncio.create_task(supervisor.keep_alive())
        os.kill(first, signal.SIGKILL)
        for _ in range(200):
            await asyncio.sleep(0.05)
            if supervisor.pids["fragile"] != first and not supervisor.down:
                break
        assert supervisor.pids["fragile"] != first and alive(supervisor.pids["fragile"])
        assert not watch.done()  # nothing to report: the child is back
        watch.cancel()
        pids = supervisor.pids
    assert not any(alive(pid) for pid in pids.values())


async def test_a_child_that_keeps_dying_is_reported_not_restarted_forever() -> None:
    supervisor = Supervisor(
        [child("steady"), child("fragile", die_after=0.2)],
        max_restarts=2,
        restart_window_s=60,
        restart_backoff_s=(0.05, 0.1),
    )
    async with supervisor:
        failure = await asyncio.wait_for(supervisor.keep_alive(), timeout=60)
        steady_pid = supervisor.pids["steady"]
    assert failure.name == "fragile" and failure.returncode == 3
    assert "keeps dying" in str(failure) and "3 times" in str(failure)
    assert not alive(steady_pid)


async def test_child_exiting_before_ready_fails_start_and_stops_the_others() -> None:
    broken = ChildSpec(
        name="broken",
        argv=[sys.executable, "-c", "import sys; sys.exit(7)"],
        ready_url=f"http://127.0.0.1:{free_port()}/health",
    )
    supervisor = Supervisor([child("good"), broken])
    with pytest.raises(
        ChildFailed, match=r"broken .* exited with code 7 before it was ready"
    ) as info:
        await supervisor.start()
    assert info.value.returncode == 7
    assert supervisor.pids == {}


async def test_child_never_ready_times_out_with_a_clear_message() -> None:
    silent = child("silent", delay=30, ready_timeout_s=0.5)
    supervisor = Supervisor([silent])
    with pytest.raises(ChildFailed, match=r"silent .* was not ready after 0.5 s"):
        await supervisor.start()
    assert supervisor.pids == {}


async def test_child_ignoring_sigterm_is_killed() -> None:
    supervisor = Supervisor([child("stubborn", stubborn=True)], stop_timeout_s=0.5)
    await supervisor.start()
    pid = supervisor.pids["stubborn"]
    supervisor.stop()
    assert not alive(pid)
    supervisor.stop()  # idempotent


async def test_missing_program_is_a_clear_error() -> None:
    spec = ChildSpec(name="ghost", argv=["/nonexistent/program"], ready_url="http://127.0.0.1:9/")
    with pytest.raises(ChildFailed, match="cannot start ghost"):
        await Supervisor([spec]).start()
