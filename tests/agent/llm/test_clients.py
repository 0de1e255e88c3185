"""Calls to the same LLM server share one OpenAI client (and its connection pool)."""

from __future__ import annotations

import asyncio

from openai import AsyncOpenAI

from agent.llm import OpenAICompatibleLLMService
from agent.llm.clients import close_shared_clients, shared_openai_client


def llm_for(base_url: str, api_key: str = "k") -> OpenAICompatibleLLMService:
    return OpenAICompatibleLLMService(api_key=api_key, base_url=base_url)


async def test_calls_to_one_server_share_a_client_and_other_servers_get_their_own() -> None:
    first, second = llm_for("http://127.0.0.1:9/v1"), llm_for("http://127.0.0.1:9/v1")
    other_server = llm_for("http://127.0.0.1:10/v1")
    other_key = llm_for("http://127.0.0.1:9/v1", api_key="other")

    assert first._client is second._client
    assert other_server._client is not first._client
    assert other_key._client is not first._client
    assert str(other_server._client.base_url).startswith("http://127.0.0.1:10/v1")
    assert other_key._client.api_key == "other"
    await close_shared_clients()
    assert first._client.is_closed()
    # After shutdown a new call gets a fresh, open client.
    assert not llm_for("http://127.0.0.1:9/v1")._client.is_closed()
    await close_shared_clients()


def test_each_event_loop_has_its_own_clients() -> None:
    """A pooled connection belongs to the loop that opened it, so clients never cross loops."""

    async def client() -> AsyncOpenAI:
        shared = shared_openai_client(api_key="k", base_url="http://127.0.0.1:9/v1")
        assert shared is shared_openai_client(api_key="k", base_url="http://127.0.0.1:9/v1")
        return shared

    first_loop, second_loop = asyncio.run(client()), asyncio.run(client())
    assert first_loop is not second_loop
    outside = shared_openai_client(api_key="k", base_url="http://127.0.0.1:9/v1")
    assert outside is not shared_openai_client(api_key="k", base_url="http://127.0.0.1:9/v1")
