"""One next token's logprobs from the prompt's last position: the very completion
llama-cpp-python writes for one token at temperature 0, at a cost that does not grow with the
conversation. Checked against llama-cpp-python's own answer on the packaged model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.turns.text_end_of_turn import chatml_prompt
from tests.conftest import requires_local_llm

pytestmark = requires_local_llm

CONVERSATION = [
    ("system", "You are a helpful voice assistant. Answer in one short sentence."),
    ("assistant", "Hello! How can I help?"),
]


@pytest.fixture(scope="module")
def models() -> Iterator[tuple[Any, Any]]:
    """llama-cpp-python as its server ran it (every position's logits kept), and the model as
    ours runs it (the last position's only)."""
    from llama_cpp import Llama

    from agent.local.llm_server import packaged_model

    path = str(packaged_model())
    options: dict[str, Any] = {"n_ctx": 1024, "n_threads": 2, "verbose": False}
    keeps_all, keeps_last = Llama(path, logits_all=True, **options), Llama(path, **options)
    yield keeps_all, keeps_last
    keeps_all.close()
    keeps_last.close()


def end_tokens_banned(llama: Any) -> dict[str, float]:
    tokens = llama.tokenize(b"<|im_end|><|endoftext|>", add_bos=False, special=True)
    return {str(token): -100.0 for token in tokens}


def assert_same_completion(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The same completion: every field but its id and time, each logprob to 1e-4 (the two
    models compute the last row in batches of different shapes)."""
    assert ours["object"] == theirs["object"] and ours["usage"] == theirs["usage"]
    (mine,), (other,) = ours["choices"], theirs["choices"]
    assert {k: mine[k] for k in ("text", "index", "finish_reason")} == {
        k: other[k] for k in ("text", "index", "finish_reason")
    }
    got, want = mine["logprobs"], other["logprobs"]
    assert got["tokens"] == want["tokens"] and got["text_offset"] == want["text_offset"]
    assert got["token_logprobs"] == pytest.approx(want["token_logprobs"], abs=1e-4)
    assert len(got["top_logprobs"]) == len(want["top_logprobs"])
    for top, expected in zip(got["top_logprobs"], want["top_logprobs"], strict=True):
        assert list(top) == list(expected)  # the same tokens, in the same order
        assert top == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(
    ("words", "banned"),
    [
        ("can you tell me", True),
        ("is the store open today", True),
        ("stop", True),
        ("Is the store open today?", True),  # <|im_end|> likeliest, but kept out
        ("Is the store open today?", False),  # and chosen: the completion stops on it
    ],
)
def test_the_answer_is_llama_cpp_pythons_own(
    models: tuple[Any, Any], words: str, banned: bool
) -> None:
    from agent.local.next_token import next_token_completion

    keeps_all, keeps_last = models
    prompt = chatml_prompt(words, CONVERSATION)
    bias = end_tokens_banned(keeps_all) if banned else None
    theirs = keeps_all.create_completion(
        prompt, max_tokens=1, temperature=0, logprobs=20, logit_bias=bias
    )
    ours = next_token_completion(keeps_last, prompt, top=20, logit_bias=bias)
    assert_same_completion(ours, theirs)
    top = ours["choices"][0]["logprobs"]["top_logprobs"]
    assert len(top) == (1 if banned else 0)  # a sampled end of message writes no logprob


def test_a_longer_prompt_reads_only_its_new_tokens_and_a_shorter_one_replays_its_last(
    models: tuple[Any, Any],
) -> None:
    from agent.local.next_token import next_token_completion

    _, llama = models
    first = chatml_prompt("book a table", CONVERSATION)
    longer = chatml_prompt("book a table for two people", CONVERSATION)
    before = next_token_completion(llama, first, top=5)
    kept = llama.n_tokens
    after = next_token_completion(llama, longer, top=5)
    assert llama.n_tokens > kept  # the longer prompt went on from what was kept
    again = next_token_completion(llama, first, top=5)  # a prefix of what is kept
    assert_same_completion(again, before)
    assert after["choices"][0]["logprobs"] != before["choices"][0]["logprobs"]


def test_an_empty_or_too_long_prompt_is_refused_with_what_to_change(
    models: tuple[Any, Any],
) -> None:
    from agent.local.next_token import PromptTooLong, next_token_completion

    _, llama = models
    with pytest.raises(ValueError, match="prompt is empty"):
        next_token_completion(llama, "", top=5)
    with pytest.raises(PromptTooLong, match="exceed context window of 1024"):
        next_token_completion(llama, "word " * 2000, top=5)
    ok = next_token_completion(llama, chatml_prompt("stop", CONVERSATION), top=5)
    assert ok["choices"][0]["logprobs"]["top_logprobs"]  # the model is unharmed
