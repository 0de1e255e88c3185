"""``voice-agent drain``: start a server's drain and wait until its calls have ended.

Made for a Kubernetes ``preStop`` hook (``deploy/kubernetes/agent/deployment.yaml``). The
kubelet runs the hook, then sends SIGTERM; ``voice-agent serve`` takes a *second* signal as
"stop at once". So the hook starts the drain with the server's own first SIGTERM (the path
``tests/agent/test_drain.py`` covers: ``/readyz`` 503 at once, new calls refused, calls in
progress go on for up to ``server.drain_timeout_s``) and returns only once the server process
is gone: the kubelet's signal then finds nothing left to cut short.

``--settle S`` waits S seconds before that signal, the server still taking calls: Kubernetes
takes a terminating pod out of the Service's ready endpoints at once, but the ingress
controller learns it a moment later, and a call it sends meanwhile should be answered, not
refused.

Why a signal and not an HTTP route: it adds no network surface (a drain route would be one
more thing to authenticate and keep off the Ingress), needs no ``server.api_token``, and the
kernel does the authentication: only a process of the same user in the same PID namespace
(the container) may signal the server. In a container the server is PID 1, the default.

Exit codes: 0 the server is gone (or was not running), 1 it still runs after ``--timeout``,
2 bad arguments or a process we may not signal.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_TIMEOUT_S = 150.0
"""``server.drain_timeout_s`` (120) plus a settle time and the time to close the last calls and
stop; the Deployment's ``terminationGracePeriodSeconds`` is above what it passes."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent drain",
        description="Drain a running 'voice-agent serve': it stops taking calls at once, lets "
        "the calls in progress end (up to server.drain_timeout_s), then exits. Returns when "
        "the server has exited. For a Kubernetes preStop hook.",
    )
    parser.add_argument(
        "--pid", type=int, default=1, help="the server's process id (default 1: in a container)"
    )
    parser.add_argument(
        "--port", type=int, default=7860, help="the server's port, for progress (default 7860)"
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="seconds to keep taking calls before the drain starts, while load balancers "
        "take the replica out (default 0)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        help=f"give up after this many seconds from the start (settle included), exit 1 "
        f"(default {DEFAULT_TIMEOUT_S:g})",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.pid < 1 or args.timeout <= 0 or not 0 <= args.settle < args.timeout:
        print(
            "voice-agent drain: --pid must be >= 1, --timeout > 0 and 0 <= --settle < --timeout",
            file=sys.stderr,
        )
        return 2
    if args.settle:
        say(f"taking calls for {args.settle:g} s more while load balancers take us out")
        time.sleep(args.settle)
    try:
        os.kill(args.pid, signal.SIGTERM)
    except ProcessLookupError:
        say(f"no process {args.pid}: nothing to drain")
        return 0
    except PermissionError:
        print(
            f"voice-agent drain: not allowed to signal process {args.pid}; run it as the "
            "server's user, in the server's container",
            file=sys.stderr,
        )
        return 2
    return wait_gone(args.pid, args.port, args.timeout - args.settle)


def wait_gone(pid: int, port: int, timeout_s: float) -> int:
    """Wait until ``pid`` has exited, saying how many calls are left every few seconds."""
    started = time.monotonic()
    said_at = -10.0
    while running(pid):
        waited = time.monotonic() - started
        if waited >= timeout_s:
            say(f"process {pid} still runs after {timeout_s:g} s; giving up")
            return 1
        if waited - said_at >= 5:
            said_at = waited
            active = active_calls(port)
            say(f"draining process {pid}: {active if active is not None else '?'} calls left")
        time.sleep(0.1)
    say(f"process {pid} has exited after {time.monotonic() - started:.1f} s")
    return 0


def running(pid: int) -> bool:
    """The process exists and is not a zombie (exited, not yet reaped by its parent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:  # no /proc (not Linux): ask the kernel instead
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    state = stat.rpartition(")")[2].split()[0]  # the name in parentheses may hold spaces
    return state not in ("Z", "X")


def active_calls(port: int) -> int | None:
    """Calls in progress per the server's ``/healthz``; ``None`` when it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
            active: int = json.load(response)["calls"]["active"]
            return active
    except (OSError, ValueError, KeyError, TypeError):
        return None


def say(line: str) -> None:
    print(f"voice-agent drain: {line}", file=sys.stderr, flush=True)
