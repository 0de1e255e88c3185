"""A TCP relay on loopback for faults below any protocol: latency, a bandwidth cap, a freeze
(the connection stays up, nothing moves: TCP backpressure does the rest), a reset (RST) and a
half-close. Put it between the server and a peer (STT, LLM, TTS, SageMaker's TLS) or between
a caller and the server; faults hit the connections open at the time, so a reconnect gets a
healthy line unless ``freeze_new`` says otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Literal, Self


class TcpFaultProxy:
    """``async with TcpFaultProxy(upstream_port) as proxy``: connect to ``proxy.port``."""

    def __init__(
        self,
        upstream_port: int,
        *,
        upstream_host: str = "127.0.0.1",
        delay_s: float = 0.0,
        bytes_per_s: float | None = None,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.delay_s = delay_s
        self.bytes_per_s = bytes_per_s
        self.freeze_new = False
        self.connections = 0
        self._lines: list[_Connection] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        assert self._server is not None, "the proxy is not serving"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for line in list(self._lines):
            line.abort()
        handlers = list(self._handlers)
        for handler in handlers:
            handler.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await self._server.wait_closed()

    def freeze(self) -> None:
        """Stop moving bytes on every open connection, both ways; keep them open."""
        for line in self._lines:
            line.thawed.clear()

    def thaw(self) -> None:
        for line in self._lines:
            line.thawed.set()

    def reset(self) -> None:
        """Reset every open connection (RST to both sides), as a crashed middlebox does."""
        for line in list(self._lines):
            line.abort()

    def half_close(self, towards: Literal["clients", "upstream"] = "clients") -> None:
        """Send FIN one way on every open connection while the other way stays open: to the
        clients (the server stopped sending), or upstream (the clients stopped sending)."""
        for line in self._lines:
            with contextlib.suppress(OSError):
                (line.client if towards == "clients" else line.upstream).write_eof()

    async def _accept(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        self.connections += 1
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
            handler.add_done_callback(self._handlers.discard)
        try:
            up_reader, upstream = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(client)
            return
        line = _Connection(client, upstream)
        if self.freeze_new:
            line.thawed.clear()
        self._lines.append(line)
        try:
            await asyncio.gather(
                self._pump(client_reader, upstream, line),
                self._pump(up_reader, client, line),
                return_exceptions=True,
            )
        except asyncio.CancelledError:
            pass  # the proxy is closing; asyncio would log a cancelled handler as an error
        finally:
            self._lines.remove(line)
            line.close()

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, line: _Connection
    ) -> None:
        while data := await source.read(65536):
            await line.thawed.wait()
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            sink.write(data)
            await sink.drain()
            if self.bytes_per_s:
                await asyncio.sleep(len(data) / self.bytes_per_s)
        with contextlib.suppress(OSError):
            sink.write_eof()


class _Connection:
    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.client, self.upstream = client, upstream
        self.thawed = asyncio.Event()
        self.thawed.set()

    def abort(self) -> None:
        _reset(self.client)
        _reset(self.upstream)

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
