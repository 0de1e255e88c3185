"""``voice-agent serve``: the server, plus the local helper servers the profile needs.

In the default (offline) profile, ``server.start_local_services`` is on and this command
first starts, as child processes, the CPU ASR server (``voice-agent asr-server``, answering
``GET /health``), Piper's TTS HTTP server (see :mod:`agent.local.piper_server`) and, with
``llm.kind = "local"``, llama.cpp's OpenAI-compatible server with the packaged small model (see
:mod:`agent.local.llm_server`; not installed, serve says so and the echo responder answers),
waits until all answer, then serves the FastAPI app (``agent.server.create_app``) with uvicorn on
``server.host:server.port``. The ``vllm`` and ``sagemaker`` profiles start nothing local.

A child that dies is restarted with backoff (calls ride it out: the STT reconnects and replays
the turn); only a child that keeps dying stops the server, with a line naming it.

Shutdown: the first SIGTERM or SIGINT drains (``/readyz`` 503 at once, new calls refused,
calls in progress go on for up to ``server.drain_timeout_s``, then close with 1001), then
uvicorn stops, then the children. A second signal ends at once.

Exit codes: 0 after a requested shutdown, 1 when a child kept dying or the server failed, 2
for a configuration problem.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

from loguru import logger

from agent.config import ConfigError, Settings, load_settings
from agent.connection_guard import guarded_http_protocol, raise_open_file_limit
from agent.local.llm_server import LocalLLMUnavailable, llm_child
from agent.local.llm_server import check_installed as check_local_llm
from agent.local.piper_server import PiperUnavailable, piper_child
from agent.local.supervisor import ChildFailed, ChildSpec, Supervisor
from agent.observability import log_privacy
from agent.observability.record_sink import RecordDirectoryError, check_directory
from agent.observability.tracing import check_tracing

MAX_WEBSOCKET_MESSAGE_BYTES = 1024 * 1024
"""No client of ours sends more in one message (a Twilio media message is ~300 bytes); uvicorn's
default is 16 MiB."""


SPARE_FDS = 1024
"""Files beyond the connection cap: STT and LLM sockets, children's pipes, logs."""


class _ShutdownRequested(Exception):
    """SIGINT or SIGTERM arrived (raised by our handler after uvicorn has shut down)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent serve",
        description="Run the voice-agent server (WebRTC, Twilio, playground). In the default "
        "profile it also starts the local ASR, Piper TTS and LLM servers.",
    )
    parser.add_argument("--profile", help="settings profile: default, vllm or sagemaker")
    parser.add_argument("--host", help="address to listen on (default from the profile)")
    parser.add_argument("--port", type=int, help="port to listen on (default from the profile)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    server: dict[str, Any] = {}
    if args.host is not None:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    try:
        settings = load_settings(args.profile, overrides={"server": server} if server else None)
        check_tracing(settings.observability)
        check_twilio_auth(settings)
        if settings.records.directory is not None:
            check_directory(settings.records.directory)
        settings = local_llm_or_echo(settings)
        children = local_children(settings)
    except (ConfigError, PiperUnavailable, LocalLLMUnavailable, RecordDirectoryError) as exc:
        print(f"voice-agent serve: {exc}", file=sys.stderr)
        return 2
    log_privacy.install(log_transcripts=settings.observability.log_transcripts)
    try:
        return asyncio.run(serve(settings, children), loop_factory=event_loop_factory())
    except KeyboardInterrupt:
        return 0


def check_twilio_auth(settings: Settings) -> None:
    """Refuse to serve unsigned phone calls beyond this machine unless the operator said so.

    Without ``twilio.auth_token`` the Twilio webhook and media stream take anyone: fine on
    loopback (the offline profile, a tunnel in front), not on an address others can reach.

    Raises:
        ConfigError: a non-loopback host, no auth token, and no ``twilio.allow_unsigned``.
    """
    twilio = settings.twilio
    if twilio.auth_token or _loopback(settings.server.host):
        return
    if not twilio.allow_unsigned:
        raise ConfigError(
            f"server.host is {settings.server.host!r}, reachable from other machines, and "
            "twilio.auth_token is not set: anyone could start phone calls. Set "
            "VOICE_AGENT_TWILIO__AUTH_TOKEN (the account's auth token), or "
            "VOICE_AGENT_TWILIO__ALLOW_UNSIGNED=true to take unsigned calls on purpose."
        )
    logger.warning(
        "twilio.allow_unsigned: Twilio webhooks and media streams are not signed; anyone who "
        f"can reach {settings.server.host}:{settings.server.port} can start phone calls"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it is installed (``uvicorn[standard]`` brings it on Linux and macOS).

    It is the loop uvicorn picks when it runs the event loop itself, the one
    ``bench/capacity.py`` measures, and it spends less CPU per wake-up than asyncio's own
    loop, which a server running dozens of calls per core does thousands of times a second.
    """
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def local_llm_or_echo(settings: Settings) -> Settings:
    """``settings``, with the echo responder in place of a local LLM that cannot run here.

    A machine where llama-cpp-python did not build still gets a working server: one line
    says why, and the calls are answered by the echo responder (``/readyz`` names it).
    """
    llm = settings.llm
    if llm.kind != "local" or not settings.server.start_local_services:
        return settings
    try:
        check_local_llm()
    except LocalLLMUnavailable as exc:
        print(f"voice-agent serve: {exc}; answering with the echo responder", file=sys.stderr)
        return settings.model_copy(update={"llm": llm.model_copy(update={"kind": "echo"})})
    return settings


def local_children(settings: Settings) -> list[ChildSpec]:
    """The child servers this profile needs (none unless ``server.start_local_services``)."""
    if not settings.server.start_local_services:
        return []
    asr = settings.asr_server
    children = [
        ChildSpec(
            name="asr-server",
            argv=[
                sys.executable,
                "-m",
                "agent.cli",
                "asr-server",
                "--profile",
                settings.profile,
                "--host",
                asr.host,
                "--port",
                str(asr.port),
            ],
            ready_url=f"http://{_http_host(asr.host)}:{asr.port}/health",
            ready_timeout_s=120.0,
        )
    ]
    if settings.tts.kind == "piper":
        children.append(piper_child(settings.tts.base_url))
    if settings.llm.kind == "local":
        children.append(llm_child(settings.llm))
    return children


def _http_host(host: str) -> str:
    """Where to reach a server bound to ``host`` (a wildcard address means this machine)."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host


async def serve(settings: Settings, children: list[ChildSpec]) -> int:
    """Start the children, serve until asked to stop or a child dies, stop the children."""
    supervisor = Supervisor(children)
    main_task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    startup_signals = (signal.SIGINT, signal.SIGTERM)
    for sig in startup_signals:  # until uvicorn takes the signals over
        if main_task is not None:
            loop.add_signal_handler(sig, main_task.cancel)
    try:
        try:
            await supervisor.start()
        except asyncio.CancelledError:
            logger.info("interrupted while starting the local services")
            return 0
        except ChildFailed as exc:
            logger.error(str(exc))
            return 1
        finally:
            for sig in startup_signals:
                loop.remove_signal_handler(sig)
        return await _run_server(settings, supervisor)
    finally:
        supervisor.stop()


class DrainingServer:
    """uvicorn, whose first exit signal drains the calls before the server stops.

    uvicorn's own first signal closes every WebSocket at once (1012); a phone call cut off
    mid-sentence is what a drain avoids. The second signal is uvicorn's forced exit.
    """

    def __init__(self, config: Any, drain: Callable[[], Awaitable[None]]) -> None:
        import uvicorn

        outer = self

        class _Server(uvicorn.Server):
            def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                outer._on_signal(sig, frame)

        self.server = _Server(config)
        self._drain = drain
        self._loop: asyncio.AbstractEventLoop | None = None
        self._draining: asyncio.Task[None] | None = None

    async def serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            await self.server.serve()
        finally:
            if self._draining is not None and not self._draining.done():
                self._draining.cancel()
                await asyncio.gather(self._draining, return_exceptions=True)

    def _on_signal(self, sig: int, _frame: FrameType | None) -> None:
        self.server._captured_signals.append(sig)  # uvicorn re-raises them once it is done
        if self._draining is None and self._loop is not None and not self.server.should_exit:
            self._loop.call_soon_threadsafe(self._start_draining)
        else:
            self.server.should_exit = self.server.force_exit = True

    def _start_draining(self) -> None:
        logger.info("draining: refusing new calls (send the signal again to stop at once)")
        self._draining = asyncio.get_running_loop().create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        started = time.monotonic()
        try:
            await self._drain()
            logger.info(f"drained in {time.monotonic() - started:.1f} s")
        finally:
            self.server.should_exit = True


async def _run_server(settings: Settings, supervisor: Supervisor) -> int:
    import uvicorn

    try:
        from agent.server import create_app
    except ImportError as exc:
        logger.error(f"the server app is not available: {exc}")
        return 1

    previous = {sig: signal.signal(sig, _raise_shutdown) for sig in (signal.SIGINT, signal.SIGTERM)}
    app = create_app(settings)
    limits = settings.server
    fds = raise_open_file_limit(limits.max_connections + SPARE_FDS)
    if fds < limits.max_connections + SPARE_FDS:
        logger.warning(
            f"only {fds} open files allowed (ulimit -n); server.max_connections is "
            f"{limits.max_connections}: raise the limit or lower the setting"
        )
    config = uvicorn.Config(
        app,
        host=limits.host,
        port=limits.port,
        ws_max_size=MAX_WEBSOCKET_MESSAGE_BYTES,
        # uvicorn would believe X-Forwarded-For from 127.0.0.1 (or $FORWARDED_ALLOW_IPS) on its
        # own; the app does it for server.trusted_proxies only (agent.server.create_app).
        proxy_headers=False,
        http=guarded_http_protocol(
            header_timeout_s=limits.header_timeout_s, max_connections=limits.max_connections
        ),
        # Connections the kernel has accepted but uvicorn has not yet taken wait here; past
        # it they are dropped unseen, beyond the guard's reach. (Capped by net.core.somaxconn.)
        backlog=limits.max_connections,
    )
    draining = DrainingServer(
        config, lambda: app.state.registry.drain(timeout_s=settings.server.drain_timeout_s)
    )
    server = draining.server
    serving = asyncio.create_task(draining.serve(), name="uvicorn")
    watching = asyncio.create_task(supervisor.keep_alive(), name="child-watch")
    try:
        done, _ = await asyncio.wait({serving, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching in done:
            logger.error(str(watching.result()))
            server.should_exit = True
            await asyncio.gather(serving, return_exceptions=True)
            return 1
        watching.cancel()
        try:
            serving.result()
        except _ShutdownRequested:
            logger.info("shut down on request")
            return 0
        if not server.started:
            logger.error(
                f"the server could not listen on {settings.server.host}:{settings.server.port}"
                " (see the error above); pick another --port"
            )
            return 1
        return 0
    finally:
        watching.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_shutdown(signum: int, _frame: FrameType | None) -> None:
    raise _ShutdownRequested(signal.Signals(signum).name)
