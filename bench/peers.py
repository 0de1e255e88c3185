"""Instant STT, LLM and TTS peers for the benches, in a child process of their own, so a bench
measures only our code's cost. They are the shared test fakes (``tests/fakes``), set to answer
at once:

- the strict realtime peer (vLLM's ``/v1/realtime``) on ``--realtime-port``: ``--deltas
  steps`` sends a delta per 80 ms of audio as vLLM does, ``appends`` one per append at once
  (a round trip per message), ``none`` none; ``transcription.done`` with a fixed text the
  moment the final commit arrives;
- on ``--http-port``: the chat server (a short streamed answer, so the LLM service path is
  exercised), the speech server (a 440 Hz tone of ``--reply-seconds`` at 24 kHz: the same
  audio as the capacity bench's stock baseline sends) and ``GET /health``.

    .venv/bin/python -m bench.peers --realtime-port P --http-port Q [--deltas steps]
        [--reply-seconds 1.0] [--core N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import uvicorn
from fastapi import FastAPI

from agent.config import LLMSettings, LocalLLMSettings
from tests.fakes.chat_server import ChatServer
from tests.fakes.realtime_peer import Deltas, RealtimePeer
from tests.fakes.serving import free_port
from tests.fakes.speech_server import SpeechServer

ROOT = Path(__file__).resolve().parent.parent
TRANSCRIPT = "turn on the lights in the kitchen"
ANSWER = "Sure, done."
TONE_RATE = 24_000
"""The speech peer's rate: the TTS settings' ``sample_rate`` when pointed at it."""
TONE_HZ = 440.0


@dataclass(frozen=True, slots=True)
class Peers:
    """Where the running peers listen."""

    realtime_port: int
    http_port: int
    pid: int = 0

    @property
    def realtime_url(self) -> str:
        return f"ws://127.0.0.1:{self.realtime_port}/v1/realtime"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible ``base_url`` of the chat and speech peers."""
        return f"http://127.0.0.1:{self.http_port}/v1"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/health"


def command(
    peers: Peers,
    *,
    deltas: Deltas = "steps",
    delta_text: str = "word ",
    reply_seconds: float = 1.0,
    core: int | None = None,
) -> list[str]:
    """The child's command line (run it from the repository root, or use :func:`running`)."""
    argv = [sys.executable, "-m", "bench.peers", "--realtime-port", str(peers.realtime_port)]
    argv += ["--http-port", str(peers.http_port), "--deltas", deltas, "--delta-text", delta_text]
    argv += ["--reply-seconds", str(reply_seconds)]
    return argv + (["--core", str(core)] if core is not None else [])


@contextlib.contextmanager
def running(
    *,
    deltas: Deltas = "steps",
    delta_text: str = "word ",
    reply_seconds: float = 1.0,
    core: int | None = None,
) -> Iterator[Peers]:
    """Start the peers in a child process, wait until they answer, stop them at the end."""
    ports = Peers(free_port(), free_port())
    argv = command(
        ports, deltas=deltas, delta_text=delta_text, reply_seconds=reply_seconds, core=core
    )
    process = subprocess.Popen(argv, cwd=ROOT)
    try:
        wait_http(ports.health_url, process)
        yield Peers(ports.realtime_port, ports.http_port, process.pid)
    finally:
        stop_process(process)


def wait_http(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Until ``url`` answers 200; ``RuntimeError`` if ``process`` exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode} before ready")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=1) as answer:
                if answer.status == 200:
                    return
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s")


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (uvicorn shuts down gracefully), then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


STOCK_LLM_SERVER = ("llama_cpp.server", "--logits_all", "True")
"""llama-cpp-python's own server as the default profile ran it before ``agent.local.llm_app``:
every position's logits kept, one-token logprobs log-softmaxed over the whole conversation."""


def start_local_llm(
    *extra_args: str, stock: bool = False
) -> tuple[subprocess.Popen[bytes], LLMSettings]:
    """llama.cpp's server with the packaged SmolLM2 as the default profile runs it (plus
    ``extra_args``; with ``stock``, :data:`STOCK_LLM_SERVER`), on a free port; not waited for
    (:func:`wait_http` its ``/models``)."""
    from agent.local.llm_server import check_installed, llm_server_argv

    llm = LLMSettings(kind="local", model="smollm2", local=LocalLLMSettings(port=free_port()))
    argv = [*llm_server_argv(llm, check_installed()), *extra_args]
    if stock:
        module, *options = STOCK_LLM_SERVER
        argv[argv.index("agent.local.llm_app")] = module
        slots = argv.index("--question_slots")  # llm_app's own option
        del argv[slots : slots + 2]
        argv.extend(options)  # the last of an option's values wins
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return process, llm


@contextlib.contextmanager
def local_llm_running(*extra_args: str, stock: bool = False) -> Iterator[LLMSettings]:
    """:func:`start_local_llm`, ready to answer; stopped on the way out."""
    process, llm = start_local_llm(*extra_args, stock=stock)
    try:
        wait_http(f"{llm.base_url}/models", process, timeout_s=120)
        yield llm
    finally:
        stop_process(process)


def http_app(reply_seconds: float) -> FastAPI:
    app = FastAPI()
    app.include_router(ChatServer(ANSWER, record=False).router)
    speech = SpeechServer(seconds=reply_seconds, sample_rate=TONE_RATE, freq=TONE_HZ, record=False)
    app.include_router(speech.router)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    return app


async def serve(args: argparse.Namespace) -> None:
    recognizer = RealtimePeer(
        model=None,
        transcript=TRANSCRIPT,
        deltas=args.deltas,
        delta_text=args.delta_text,
        keep_audio=False,
        port=args.realtime_port,
    )
    config = uvicorn.Config(
        http_app(args.reply_seconds), host="127.0.0.1", port=args.http_port, log_level="warning"
    )
    async with recognizer:  # listening before /health answers
        await uvicorn.Server(config).serve()  # until SIGTERM or SIGINT


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run`` on uvloop when installed, as uvicorn's ``loop="auto"`` picks."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--realtime-port", type=int, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--deltas", choices=get_args(Deltas), default="steps")
    parser.add_argument("--delta-text", default="word ")
    parser.add_argument("--reply-seconds", type=float, default=1.0)
    parser.add_argument("--core", type=int, help="pin the peers to this CPU core")
    args = parser.parse_args(argv)
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    run_loop(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
