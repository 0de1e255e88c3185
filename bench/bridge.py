"""What the SageMaker bridge adds per message, against a direct connection in the same run.

Three processes, as in production: an instant realtime peer standing in for vLLM (the test
fakes' strict realtime peer, run by ``bench/peers.py``, answering every
``input_audio_buffer.append`` with one small ``transcription.delta`` at once), the bridge
served by uvicorn exactly as the container runs it (``uvicorn_config``, uvloop when
installed), and the load client here. Each is its own process so the peer's and the client's
CPU never count as the bridge's.

For 20 ms and 100 ms appends (640 / 3200 bytes of PCM16 through ``encode_pcm_append``) and 1, 10
and 100 concurrent streams, each configuration runs straight to the peer and through the bridge,
alternating in short rounds (the cores are shared: both paths meet the same neighbours), with fresh
connections each time:

- paced: every stream sends at a fixed rate (50 msg/s, real-time for 20 ms audio) from a random
  phase; round trip per message = client send → its delta received; p50 and p99.
- unpaced: every stream keeps a window of appends in flight; round trips per second = the
  most the path carries on this machine.

The bridge's CPU comes from ``/proc/<pid>`` (schedstat in ns, else stat ticks): seconds of CPU per
stream-second when paced, µs per relayed round trip (two frames each way) when unpaced.
Ratios are bridge/direct from the same run, the only figures comparable across machines.

    .venv/bin/python -m bench.bridge [--quick] [--rate 50] [--window 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import multiprocessing
import os
import platform
import random
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnProcess
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import uvicorn
import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from agent.stt.protocol import (
    Commit,
    SessionCreated,
    SessionUpdate,
    TranscriptionDelta,
    encode_pcm_append,
    parse_server_event,
)
from bench import peers
from container.bridge.app import create_app, uvicorn_config
from container.bridge.settings import STREAM_PATH, BridgeSettings

uvloop: ModuleType | None
try:
    import uvloop
except ImportError:  # the bridge falls back to asyncio's loop the same way (uvicorn "auto")
    uvloop = None

RESULTS = Path(__file__).resolve().parent / "results" / "bridge.md"
MODEL = "bench-model"
REPLY = TranscriptionDelta(delta="x").to_json()
"""What the peer answers every append with (``peers.running(deltas="appends")``)."""
APPENDS = {"20 ms": b"\x10\x00" * 320, "100 ms": b"\x10\x00" * 1600}  # 640 / 3200 bytes
STREAM_COUNTS = (1, 10, 100)
Route = Literal["direct", "bridge"]


@dataclass(frozen=True, slots=True)
class Durations:
    paced_s: float
    unpaced_s: float
    warmup_s: float
    idle_s: float
    rounds: int  # direct and bridge alternate this many times per configuration


# Rounds, not one long run each: the cores are shared, and alternating short runs exposes
# both paths to the same neighbours, so the ratios stay meaningful when the load shifts.
FULL = Durations(paced_s=2.2, unpaced_s=1.0, warmup_s=0.3, idle_s=2.0, rounds=3)
QUICK = Durations(paced_s=1.2, unpaced_s=0.8, warmup_s=0.25, idle_s=1.0, rounds=1)


# ----------------------------------------------------------------------------- processes


def run_loop[T](main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on uvloop when installed, as uvicorn's ``loop="auto"`` picks."""
    if uvloop is not None:
        return uvloop.run(main)
    return asyncio.run(main)


def run_bridge(upstream_url: str, port_queue: multiprocessing.Queue, log_path: str) -> None:  # type: ignore[type-arg]
    """The bridge as the container serves it; its JSON logs go to ``log_path``."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log_fd, 2)
    settings = BridgeSettings(upstream_url=upstream_url, host="127.0.0.1", port=0)
    # Bound and listening before the port is reported: connections wait in the backlog until
    # uvicorn accepts them, so the client needs no polling.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    port_queue.put(sock.getsockname()[1])
    uvicorn.Server(uvicorn_config(create_app(settings), settings)).run(sockets=[sock])


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of ``pid`` so far (ns resolution where schedstat exists)."""
    try:
        total_ns = 0
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                total_ns += int(stat.read().split()[0])
        return total_ns / 1e9
    except (OSError, ValueError, IndexError):
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU time the machine's cores spent running programs (or lost to the hypervisor), so far.

    Interrupt time is left out: loopback traffic is ours but not always charged to our
    processes, so leaving it in would count the bench's own networking as a neighbour's.
    """
    with open("/proc/stat") as stat:
        user, nice, system, _idle, _iowait, _irq, _softirq, steal = (
            int(x) for x in stat.readline().split()[1:9]
        )
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class CpuSample:
    bridge_s: float
    others_s: float  # the machine's busy time that is none of the bench's three processes


@dataclass(frozen=True, slots=True)
class CpuMeter:
    """Reads the bridge's CPU and, to show how noisy a run was, everyone else's."""

    bridge_pid: int
    peer_pid: int

    def sample(self) -> CpuSample:
        bridge = cpu_seconds(self.bridge_pid)
        bench = bridge + cpu_seconds(self.peer_pid) + cpu_seconds(os.getpid())
        return CpuSample(bridge_s=bridge, others_s=machine_busy_seconds() - bench)

    def since(self, start: CpuSample) -> CpuSample:
        now = self.sample()
        return CpuSample(now.bridge_s - start.bridge_s, max(0.0, now.others_s - start.others_s))


def stop(process: SpawnProcess) -> None:
    """SIGTERM (uvicorn shuts down gracefully), then SIGKILL if it lingers."""
    if process.is_alive():
        process.terminate()
        process.join(8)
    if process.is_alive():
        process.kill()
        process.join(5)


# ----------------------------------------------------------------------------- load client


@dataclass
class Stream:
    """One client connection: appends in flight, in order (the peer answers in order)."""

    ws: ClientConnection
    window: asyncio.Semaphore | None
    sent_at: deque[float] = field(default_factory=deque)
    latencies: list[float] = field(default_factory=list)
    replies_in_window: int = 0
    done_sending: bool = False
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # all sent, all answered

    def finish_sending(self) -> None:
        self.done_sending = True
        if not self.sent_at:
            self.settled.set()


@dataclass
class RunResult:
    latencies: list[float]
    replies: int  # round trips completed inside the measured window
    cpu_s: float  # the bridge's CPU over the measured window (idle in direct runs)
    others_s: float  # CPU the rest of the machine used meanwhile (neighbours' noise)
    measured_s: float

    @property
    def msgs_per_s(self) -> float:
        return self.replies / self.measured_s

    @classmethod
    def pooled(cls, runs: Sequence[RunResult]) -> RunResult:
        return cls(
            latencies=[x for run in runs for x in run.latencies],
            replies=sum(run.replies for run in runs),
            cpu_s=sum(run.cpu_s for run in runs),
            others_s=sum(run.others_s for run in runs),
            measured_s=sum(run.measured_s for run in runs),
        )

    def p(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] * 1e3


Row = tuple[str, int, RunResult, RunResult]
"""append size, streams, direct, bridge"""


async def open_stream(url: str, window: int | None) -> Stream:
    ws = await connect(url, compression=None, proxy=None, max_size=None, ping_interval=None)
    greeting = parse_server_event(await asyncio.wait_for(ws.recv(), 10))
    if not isinstance(greeting, SessionCreated):
        raise RuntimeError(f"{url} greeted with {greeting!r:.200}, not session.created")
    await ws.send(SessionUpdate(MODEL).to_json())
    await ws.send(Commit().to_json())  # a generation: the peer answers appends inside one
    return Stream(ws=ws, window=asyncio.Semaphore(window) if window else None)


async def receive(stream: Stream, measure: tuple[float, float]) -> None:
    start, end = measure
    with contextlib.suppress(ConnectionClosed):
        async for message in stream.ws:
            now = time.perf_counter()
            if message != REPLY:
                continue
            sent = stream.sent_at.popleft()
            if stream.window is not None:
                stream.window.release()
            if start <= sent < end:
                stream.latencies.append(now - sent)
            if start <= now < end:
                stream.replies_in_window += 1
            if stream.done_sending and not stream.sent_at:
                stream.settled.set()


async def send(
    stream: Stream, message: str, begin: float, end: float, period: float | None
) -> None:
    """Paced: on a fixed schedule from a random phase (late sends go at once, no skipping);
    unpaced: as fast as the window allows."""
    next_at = begin + (random.random() * period if period else 0.0)
    while True:
        if period is not None:
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at += period
        elif stream.window is not None:
            await stream.window.acquire()
        now = time.perf_counter()
        if now >= end:
            return
        stream.sent_at.append(now)
        await stream.ws.send(message)


async def drain(stream: Stream, timeout_s: float) -> None:
    """Until every append has its reply (or ``timeout_s``; the caller counts what's left)."""
    stream.finish_sending()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stream.settled.wait(), timeout_s)


async def run_load(
    url: str,
    *,
    streams: int,
    message: str,
    duration_s: float,
    warmup_s: float,
    rate: float | None,
    window: int,
    meter: CpuMeter | None,
) -> RunResult:
    opened: list[Stream] = []
    try:
        for batch in range(0, streams, 25):  # a real fleet doesn't dial 100 calls in one tick
            opened += await asyncio.gather(
                *(
                    open_stream(url, None if rate else window)
                    for _ in range(min(25, streams - batch))
                )
            )
        begin = time.perf_counter() + 0.05
        measure = (begin + warmup_s, begin + duration_s)
        receivers = [asyncio.create_task(receive(s, measure)) for s in opened]
        period = 1.0 / rate if rate else None
        senders = [asyncio.create_task(send(s, message, begin, measure[1], period)) for s in opened]
        await asyncio.sleep(max(0.0, measure[0] - time.perf_counter()))
        cpu_start = meter.sample() if meter else None
        await asyncio.sleep(max(0.0, measure[1] - time.perf_counter()))
        cpu = meter.since(cpu_start) if meter and cpu_start else CpuSample(0.0, 0.0)
        await asyncio.gather(*senders)
        await asyncio.gather(*(drain(s, 10.0) for s in opened))
        lost = sum(len(s.sent_at) for s in opened)
        if lost:
            raise RuntimeError(f"{lost} appends never got a reply through {url}")
        for stream in opened:
            await stream.ws.close()
        await asyncio.gather(*receivers)
    finally:
        for stream in opened:
            stream.ws.transport.abort()
    measured = measure[1] - measure[0]
    return RunResult(
        latencies=[x for s in opened for x in s.latencies],
        replies=sum(s.replies_in_window for s in opened),
        cpu_s=cpu.bridge_s,
        others_s=cpu.others_s,
        measured_s=measured,
    )


# ----------------------------------------------------------------------------- report


def ratio(bridge: float, direct: float) -> str:
    return f"{bridge / direct:.2f}" if direct > 0 else "n/a"


def other_load(direct: RunResult, bridge: RunResult) -> str:
    """Cores' worth of CPU used by other programs during both paths' measured windows."""
    return f"{(direct.others_s + bridge.others_s) / (direct.measured_s + bridge.measured_s):.2f}"


def environment_lines(args: argparse.Namespace, durations: Durations) -> list[str]:
    return [
        f"Run {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z} on {os.cpu_count()} CPU(s) "
        f"({platform.machine()}, Python {platform.python_version()}, uvicorn "
        f"{uvicorn.__version__}, websockets {websockets.__version__}, "
        f"event loop {'uvloop ' + uvloop.__version__ if uvloop else 'asyncio'}).",
        f"Command: `.venv/bin/python -m bench.bridge{' --quick' if args.quick else ''}"
        f"{'' if args.rate == 50 else f' --rate {args.rate:g}'}"
        f"{'' if args.window == 8 else f' --window {args.window}'}`; "
        f"paced {durations.paced_s:g} s and unpaced {durations.unpaced_s:g} s per run, the "
        f"first {durations.warmup_s:g} s of each not measured; direct and bridge alternate "
        f"{durations.rounds} time(s) per configuration and the rounds are pooled.",
        "Peer, bridge and this client are three processes on the same cores; the peer (the "
        "test fakes' strict realtime peer) answers each append with one small "
        "`transcription.delta` at once.",
    ]


def latency_table(rows: Sequence[Row], rate: float) -> list[str]:
    lines = [
        f"### Round trip per append, paced at {rate:g} msg/s per stream",
        "",
        "| append | streams | direct p50 ms | bridge p50 ms | p50 ratio | added p50 ms "
        "| direct p99 ms | bridge p99 ms | p99 ratio | added p99 ms "
        "| msg/s direct / bridge (offered) | bridge CPU s per stream-s | other load, cores |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, streams, direct, bridge in rows:
        d50, b50, d99, b99 = direct.p(0.5), bridge.p(0.5), direct.p(0.99), bridge.p(0.99)
        lines.append(
            f"| {size} | {streams} | {d50:.2f} | {b50:.2f} | {ratio(b50, d50)} "
            f"| {b50 - d50:+.2f} | {d99:.2f} | {b99:.2f} | {ratio(b99, d99)} | {b99 - d99:+.2f} "
            f"| {direct.msgs_per_s:.0f} / {bridge.msgs_per_s:.0f} ({rate * streams:.0f}) "
            f"| {bridge.cpu_s / (streams * bridge.measured_s):.4f} | {other_load(direct, bridge)} |"
        )
    return lines


def throughput_table(rows: Sequence[Row], window: int) -> list[str]:
    lines = [
        f"### Most round trips per second, unpaced ({window} appends in flight per stream)",
        "",
        "| append | streams | direct msg/s | bridge msg/s | ratio | direct p50 ms "
        "| bridge p50 ms | bridge CPU µs per msg | bridge CPU % of a core | other load, cores |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for size, streams, direct, bridge in rows:
        relayed = bridge.msgs_per_s * bridge.measured_s
        per_msg = bridge.cpu_s / relayed * 1e6 if relayed else float("nan")
        lines.append(
            f"| {size} | {streams} | {direct.msgs_per_s:.0f} | {bridge.msgs_per_s:.0f} "
            f"| {ratio(bridge.msgs_per_s, direct.msgs_per_s)} | {direct.p(0.5):.2f} "
            f"| {bridge.p(0.5):.2f} | {per_msg:.0f} "
            f"| {100 * bridge.cpu_s / bridge.measured_s:.0f} | {other_load(direct, bridge)} |"
        )
    return lines


# ----------------------------------------------------------------------------- main


async def measure(
    args: argparse.Namespace, durations: Durations, urls: dict[Route, str], meter: CpuMeter
) -> tuple[float, list[Row], list[Row]]:
    paced: list[Row] = []
    unpaced: list[Row] = []
    # Warm both paths (imports, first connections, code caches) before anything counts.
    for url in urls.values():
        await run_load(
            url, streams=10, message=encode_pcm_append(APPENDS["20 ms"]), duration_s=0.3,
            warmup_s=0.0, rate=None, window=args.window, meter=None,
        )  # fmt: skip
    # What the bridge burns with no stream open (uvicorn's housekeeping tick): the floor under
    # the per-stream CPU figures, which matters at 1 stream.
    idle_from = meter.sample()
    await asyncio.sleep(durations.idle_s)
    idle_cpu = meter.since(idle_from).bridge_s / durations.idle_s
    for size, pcm in APPENDS.items():
        message = encode_pcm_append(pcm)
        for streams in STREAM_COUNTS:
            for rate, duration_s, rows in (
                (args.rate, durations.paced_s, paced),
                (None, durations.unpaced_s, unpaced),
            ):
                runs: dict[Route, list[RunResult]] = {"direct": [], "bridge": []}
                order: tuple[Route, Route] = ("direct", "bridge")
                for _ in range(durations.rounds):
                    for path in order:
                        runs[path].append(
                            await run_load(
                                urls[path],
                                streams=streams,
                                message=message,
                                duration_s=duration_s,
                                warmup_s=durations.warmup_s,
                                rate=rate,
                                window=args.window,
                                meter=meter,
                            )
                        )
                    order = (order[1], order[0])  # neither path always runs first
                results = {path: RunResult.pooled(found) for path, found in runs.items()}
                rows.append((size, streams, results["direct"], results["bridge"]))
                mode = f"paced {rate:g}/s" if rate else "unpaced"
                print(
                    f"  {size:>6} x{streams:<3} {mode:<12} direct p50 "
                    f"{results['direct'].p(0.5):6.2f} ms {results['direct'].msgs_per_s:6.0f}/s"
                    f" | bridge p50 {results['bridge'].p(0.5):6.2f} ms "
                    f"{results['bridge'].msgs_per_s:6.0f}/s",
                    file=sys.stderr,
                    flush=True,
                )
    return idle_cpu, paced, unpaced


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="about 30 s instead of about 2 min")
    parser.add_argument("--rate", type=float, default=50.0, help="paced appends/s per stream")
    parser.add_argument("--window", type=int, default=8, help="unpaced appends in flight/stream")
    parser.add_argument("--output", type=Path, default=RESULTS, help="markdown file to write")
    args = parser.parse_args(argv)
    if args.rate <= 0 or args.window < 1:
        parser.error("--rate must be above 0 and --window at least 1")
    durations = QUICK if args.quick else FULL

    spawn = multiprocessing.get_context("spawn")  # fresh interpreters: no loop or state shared
    ports: multiprocessing.Queue = spawn.Queue()  # type: ignore[type-arg]
    log_fd, log_path = tempfile.mkstemp(prefix="bench-bridge-", suffix=".log")
    os.close(log_fd)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    try:
        with peers.running(deltas="appends", delta_text="x") as peer:
            upstream = peer.realtime_url
            bridge = spawn.Process(
                target=run_bridge,
                args=(upstream, ports, log_path),
                name="bench-bridge",
                daemon=True,
            )
            try:
                bridge.start()
                bridge_url = f"ws://127.0.0.1:{ports.get(timeout=30)}{STREAM_PATH}"
                assert bridge.pid is not None
                meter = CpuMeter(bridge_pid=bridge.pid, peer_pid=peer.pid)
                urls: dict[Route, str] = {"direct": upstream, "bridge": bridge_url}
                print(f"peer {upstream}, bridge {bridge_url} (pid {bridge.pid})", file=sys.stderr)
                idle_cpu, paced, unpaced = run_loop(measure(args, durations, urls, meter))
            finally:
                stop(bridge)
    except BaseException:
        with contextlib.suppress(OSError):
            tail = Path(log_path).read_text(errors="replace").splitlines()[-20:]
            if tail:
                print("bridge log (last lines):\n" + "\n".join(tail), file=sys.stderr)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.unlink(log_path)

    report = [
        "## SageMaker bridge: added latency and throughput",
        "",
        *environment_lines(args, durations),
        "",
        *latency_table(paced, args.rate),
        "",
        *throughput_table(unpaced, args.window),
        "",
        "Ratios are bridge/direct within this run; added = bridge - direct. One message = one "
        "append in and its delta out (the bridge relays a frame each way). Percentiles over "
        "every append sent in the measured window; CPU from /proc for the bridge process only. "
        "Other load: CPU used meanwhile by programs outside this benchmark (of "
        f"{os.cpu_count()} cores); a high figure means both paths ran short of CPU.",
        f"Bridge CPU with no stream open: {idle_cpu * 100:.2f} % of a core.",
        f"Total run time {time.monotonic() - started:.0f} s; 1-minute load average "
        f"{load_before:.2f} before, {os.getloadavg()[0]:.2f} after (other work on the same "
        "cores widens the tails of both paths; compare ratios, not absolute figures).",
    ]
    text = "\n".join(report) + "\n"
    print(text)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"written to {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # main() has already stopped the peer and the bridge
        print("interrupted", file=sys.stderr)
        sys.exit(130)
