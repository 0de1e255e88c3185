"""The default profile's LLM server as the supervisor starts it: the packaged model, loopback,
the sized settings, and one answer streamed over its OpenAI-compatible API."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from agent.config import LLMSettings, load_settings
from agent.local.llm_server import MODEL_PACKAGE, llm_child, packaged_model
from tests.conftest import requires_local_llm

pytestmark = requires_local_llm


def test_the_model_is_the_gguf_inside_the_installed_package() -> None:
    model = packaged_model()
    assert model.suffix == ".gguf" and model.is_file()
    assert model.parent.name == MODEL_PACKAGE
    assert model.stat().st_size > 50_000_000  # the weights, not a pointer file


def test_the_default_profile_starts_it_on_loopback_with_its_sized_settings() -> None:
    llm = load_settings("default").llm
    child = llm_child(llm)
    argv = list(child.argv)

    def option(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert argv[1:3] == ["-m", "llama_cpp.server"]
    assert Path(option("--model")) == packaged_model()
    assert option("--host") == "127.0.0.1"
    assert option("--port") == str(llm.local.port)
    assert option("--model_alias") == llm.model
    assert option("--n_threads") == str(llm.local.n_threads)
    assert option("--n_ctx") == str(llm.local.n_ctx)
    assert option("--n_batch") == str(llm.local.n_batch)
    # One call's answer is never cut short because another call asked meanwhile.
    assert option("--interrupt_requests") == "False"
    assert child.ready_url == f"http://127.0.0.1:{llm.local.port}/v1/models"
    assert llm.base_url == f"http://127.0.0.1:{llm.local.port}/v1"


async def test_the_running_server_streams_a_chat_answer_under_its_alias(
    local_llm: LLMSettings,
) -> None:
    async with httpx.AsyncClient(base_url=str(local_llm.base_url), timeout=60) as http:
        models = (await http.get("/models")).json()
        assert [m["id"] for m in models["data"]] == [local_llm.model]
        body = {
            "model": local_llm.model,
            "messages": [{"role": "user", "content": "Say hello."}],
            "stream": True,
            "max_tokens": 20,
        }
        pieces = []
        async with http.stream("POST", "/chat/completions", json=body) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    pieces.append(delta.get("content") or "")
    assert len([p for p in pieces if p]) > 1  # streamed, piece by piece
    assert "".join(pieces).strip()
