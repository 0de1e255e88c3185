"""One OpenAI client per LLM server and event loop, shared by every call.

Pipecat's OpenAI service builds a fresh ``AsyncOpenAI`` client for each service instance, that
is for each call. Each one builds an httpx client, and each of those builds an SSL context and
loads the CA bundle, even for a plain ``http://`` vLLM: 20-30 ms of CPU per call on this VM
kind, a third of the server's CPU while calls are being set up in ``bench/capacity.py``, and a
new TCP connection per call. ``AsyncOpenAI`` is made for concurrent use, and Pipecat never
closes the client it is given, so calls to the same server can share one client and its
connection pool. Clients are kept per event loop (a pooled connection belongs to the loop that
opened it) and closed by :func:`close_shared_clients` at server shutdown.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Mapping

from openai import AsyncOpenAI

_ClientKey = tuple[str | None, str | None, str | None, str | None, tuple[tuple[str, str], ...]]
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_ClientKey, AsyncOpenAI]] = (
    weakref.WeakKeyDictionary()
)


def shared_openai_client(
    *,
    api_key: str | None,
    base_url: str | None,
    organization: str | None = None,
    project: str | None = None,
    default_headers: Mapping[str, str] | None = None,
) -> AsyncOpenAI:
    """The running loop's client for these settings (created on first use).

    Outside a running loop (nothing can share it there) a new client is returned.
    """
    key: _ClientKey = (
        api_key,
        base_url,
        organization,
        project,
        tuple(sorted((default_headers or {}).items())),
    )
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return _new_client(key)
    clients = _clients.setdefault(loop, {})
    client = clients.get(key)
    if client is None or client.is_closed():
        client = clients[key] = _new_client(key)
    return client


async def close_shared_clients() -> None:
    """Close the running loop's shared clients (their pooled connections)."""
    clients = _clients.pop(asyncio.get_running_loop(), {})
    for client in clients.values():
        await client.close()


def _new_client(key: _ClientKey) -> AsyncOpenAI:
    """An OpenAI client with the library's default pool: up to 1000 connections, 100 kept."""
    api_key, base_url, organization, project, headers = key
    return AsyncOpenAI(
        api_key=api_key,
        base_url=base_url,
        organization=organization,
        project=project,
        default_headers=dict(headers) or None,
    )
