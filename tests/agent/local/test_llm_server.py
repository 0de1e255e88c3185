"""The default profile's LLM server as the supervisor starts it: the packaged model, loopback,
the sized settings, and one answer streamed over its OpenAI-compatible API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.config import LLMSettings, load_settings
from agent.local.llm_server import MODEL_PACKAGE, llm_child, packaged_model
from tests.conftest import requires_local_llm, running_local_llm

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

    assert argv[1:3] == ["-m", "agent.local.llm_app"]
    assert Path(option("--model")) == packaged_model()
    assert option("--host") == "127.0.0.1"
    assert option("--port") == str(llm.local.port)
    assert option("--model_alias") == llm.model
    assert option("--n_threads") == str(llm.local.n_threads)
    assert option("--n_ctx") == str(llm.local.n_ctx)
    assert option("--n_batch") == str(llm.local.n_batch)
    # One call's answer is never cut short because another call asked meanwhile.
    assert option("--interrupt_requests") == "False"
    # Answers keep only their last position's logits; one-token logprobs are llm_app's own,
    # read on the answers' context (no second KV cache).
    assert option("--logits_all") == "False"
    assert option("--question_slots") == str(llm.local.question_slots) == "0"
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


async def test_the_running_server_gives_one_next_tokens_logprobs_and_refuses_more(
    local_llm: LLMSettings,
) -> None:
    """The text end of turn's question (one token at temperature 0, 20 likeliest) is answered
    with the model running ``logits_all`` off; a logprobs request it cannot serve so gets a 400
    that says what it can, and the server goes on answering."""
    async with httpx.AsyncClient(base_url=str(local_llm.base_url), timeout=60) as http:
        question = {
            "model": local_llm.model,
            "prompt": "<|im_start|>user\nis the store open today",
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": 20,
        }
        answer = await http.post("/completions", json=question)
        assert answer.status_code == 200, answer.text
        (choice,) = answer.json()["choices"]
        (top,) = choice["logprobs"]["top_logprobs"]
        assert len(top) >= 20 and all(value <= 0 for value in top.values())
        assert answer.json()["model"] == local_llm.model

        for wrong in ({"max_tokens": 5}, {"temperature": 0.7}, {"stream": True}, {"echo": True}):
            refused = await http.post("/completions", json={**question, **wrong})
            assert refused.status_code == 400, (wrong, refused.text)
            assert "one greedy next token only" in refused.json()["detail"]
        too_long = await http.post("/completions", json={**question, "prompt": "word " * 9000})
        assert too_long.status_code == 400
        assert "exceed context window" in too_long.json()["detail"]
        for key, says in (("49152", "this model's are 0-49151"), ("-1", "0-49151"), ("x", "not")):
            bad_bias = await http.post("/completions", json={**question, "logit_bias": {key: 1}})
            assert bad_bias.status_code == 400 and says in bad_bias.json()["detail"], key

        for empty in ({**question, "prompt": ""}, {"model": local_llm.model, "prompt": [""]}):
            refused = await http.post("/completions", json=empty)  # llama-cpp-python's: a 500
            assert refused.status_code == 400 and "prompt is empty" in refused.json()["detail"]

        plain = {"model": local_llm.model, "prompt": "The sky is", "max_tokens": 3}
        completion = await http.post("/completions", json=plain)  # llama-cpp-python's own
        assert completion.status_code == 200 and "logprobs" in completion.json()["choices"][0]
        again = await http.post("/completions", json=question)
        assert again.json()["choices"][0]["logprobs"]["top_logprobs"] == [top]


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
)


@settings(max_examples=40, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(
            ["max_tokens", "temperature", "logprobs", "prompt", "logit_bias", "stream", "n", "user"]
        ),
        st.one_of(VALUES, st.dictionaries(st.text(max_size=8), VALUES, max_size=3)),
        max_size=3,
    ),
)
def test_no_logprobs_request_breaks_the_server(local_llm: LLMSettings, changes: dict) -> None:
    """Whatever a client sends with ``logprobs``, the answer is a completion or a 4xx that
    says why, never a 500, and the next question is answered as before."""
    question = {"model": local_llm.model, "prompt": "hello", "max_tokens": 1, "temperature": 0}
    with httpx.Client(base_url=str(local_llm.base_url), timeout=60) as http:
        answer = http.post("/completions", json={**question, "logprobs": 5, **changes})
        assert answer.status_code in (200, 400, 422), (changes, answer.text)
        if answer.status_code == 200 and not changes.get("stream"):
            assert answer.json()["choices"][0]["finish_reason"] in ("length", "stop")
        after = http.post("/completions", json={**question, "logprobs": 5})
        assert after.status_code == 200, after.text


@pytest.fixture(scope="module")
def sequences_llm() -> Iterator[LLMSettings]:
    """The server with ``question_slots`` 4: questions on a context of their own."""
    with running_local_llm(question_slots=4) as settings:
        yield settings


def question(settings: LLMSettings, words: str, user: str) -> dict:
    return {
        "model": settings.model,
        "prompt": f"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n{words}",
        "max_tokens": 1,
        "temperature": 0,
        "logprobs": 20,
        "user": user,
    }


async def answered_while_another_call_streams(settings: LLMSettings) -> bool:
    """Whether a question sent once another call's answer has begun to stream comes back
    before that answer ends (an answer of 120 tokens: its end tokens are banned)."""
    async with httpx.AsyncClient(base_url=str(settings.base_url), timeout=120) as http:
        tokenize = str(settings.base_url).removesuffix("/v1") + "/extras/tokenize"
        tokens = await http.post(tokenize, json={"input": "<|im_end|><|endoftext|>"})
        answer = {
            "model": settings.model,
            "messages": [{"role": "user", "content": "Tell me a long story."}],
            "stream": True,
            "max_tokens": 120,
            "logit_bias": {str(token): -100 for token in tokens.json()["tokens"]},
        }
        streaming, done = asyncio.Event(), asyncio.Event()

        async def other_call() -> None:
            async with http.stream("POST", "/chat/completions", json=answer) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        streaming.set()
            done.set()

        other = asyncio.create_task(other_call())
        await streaming.wait()
        reply = await http.post("/completions", json=question(settings, "can you", "call-2"))
        assert reply.status_code == 200, reply.text
        in_time = not done.is_set()
        await other
        return in_time


async def test_with_question_slots_a_question_does_not_wait_for_another_calls_answer(
    sequences_llm: LLMSettings,
) -> None:
    assert await answered_while_another_call_streams(sequences_llm)


async def test_by_default_a_question_waits_behind_the_answers(local_llm: LLMSettings) -> None:
    """The default (``llm.local.question_slots = 0``, no second KV cache): the question is read
    on the answers' context, after the answer that holds it."""
    assert not await answered_while_another_call_streams(local_llm)


async def test_with_question_slots_each_caller_reads_on_from_its_own_prompt(
    sequences_llm: LLMSettings,
) -> None:
    """Two calls asking in turn: each question reads only the words its call added, as the
    usage's ``cached_tokens`` says."""
    async with httpx.AsyncClient(base_url=str(sequences_llm.base_url), timeout=60) as http:

        async def ask(words: str, user: str) -> dict:
            reply = await http.post("/completions", json=question(sequences_llm, words, user))
            assert reply.status_code == 200, reply.text
            return reply.json()["usage"]

        first = {user: await ask("can you tell me", user) for user in ("call-a", "call-b")}
        for user in ("call-a", "call-b"):
            later = await ask("can you tell me the opening hours", user)
            assert later["prompt_tokens_details"]["cached_tokens"] == first[user]["prompt_tokens"]


async def test_with_question_slots_bad_questions_are_refused_and_harm_no_callers_sequence(
    sequences_llm: LLMSettings,
) -> None:
    """Bad input on the sequences' path gets a 400 or 422 that says why, and the caller's kept
    prompt survives it: its next question still reads only the new words."""
    async with httpx.AsyncClient(base_url=str(sequences_llm.base_url), timeout=60) as http:
        good = question(sequences_llm, "can you tell me", "call-x")
        first = await http.post("/completions", json=good)
        assert first.status_code == 200, first.text
        bad = (
            ({"prompt": "word " * 9000}, 400, "exceed context window"),
            ({"prompt": ""}, 400, "prompt is empty"),
            ({"logit_bias": {"49152": -100}}, 400, "this model's are 0-49151"),
            ({"user": ["not", "a", "name"]}, 422, "user"),
        )
        for change, code, says in bad:
            refused = await http.post("/completions", json={**good, **change})
            assert refused.status_code == code and says in refused.text, (change, refused.text)
        later = await http.post(
            "/completions", json=question(sequences_llm, "can you tell me the hours", "call-x")
        )
        assert later.status_code == 200, later.text
        kept = first.json()["usage"]["prompt_tokens"]
        assert later.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == kept
