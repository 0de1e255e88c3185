"""One next token's logprobs from the prompt's last position: the very completion
llama-cpp-python writes for one token at temperature 0, at a cost that does not grow with the
conversation, read on the answers' context or in a caller's own sequence beside it. Checked
against llama-cpp-python's own answer on the packaged model."""

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


@pytest.fixture(scope="module")
def slots(models: tuple[Any, Any]) -> Any:
    """Three callers' sequences on a context beside ``keeps_last``'s own."""
    from agent.local.question_slots import QuestionSlots

    return QuestionSlots(models[1], 3)


@pytest.fixture(params=["shared", "slots"])
def reader(request: pytest.FixtureRequest, models: tuple[Any, Any], slots: Any) -> Any:
    """Each place a question is read: the answers' own context, or a caller's sequence."""
    from agent.local.question_slots import SharedContext

    return SharedContext(models[1]) if request.param == "shared" else slots


def cached(completion: dict[str, Any]) -> int:
    return int(completion["usage"]["prompt_tokens_details"]["cached_tokens"])


def end_tokens_banned(llama: Any) -> dict[str, float]:
    tokens = llama.tokenize(b"<|im_end|><|endoftext|>", add_bos=False, special=True)
    return {str(token): -100.0 for token in tokens}


def assert_same_completion(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The same completion: every field but its id, time and cached tokens, each logprob to
    1e-4 (the two models compute the last row in batches of different shapes)."""

    def usage(completion: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in completion["usage"].items() if k != "prompt_tokens_details"}

    assert ours["object"] == theirs["object"] and usage(ours) == usage(theirs)
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
    models: tuple[Any, Any], reader: Any, words: str, banned: bool
) -> None:
    from agent.local.next_token import next_token_completion

    keeps_all, keeps_last = models
    prompt = chatml_prompt(words, CONVERSATION)
    bias = end_tokens_banned(keeps_all) if banned else None
    theirs = keeps_all.create_completion(
        prompt, max_tokens=1, temperature=0, logprobs=20, logit_bias=bias
    )
    ours = next_token_completion(keeps_last, prompt, reader=reader, top=20, logit_bias=bias)
    assert_same_completion(ours, theirs)
    top = ours["choices"][0]["logprobs"]["top_logprobs"]
    assert len(top) == (1 if banned else 0)  # a sampled end of message writes no logprob


def test_a_longer_prompt_reads_only_its_new_tokens_and_a_shorter_one_replays_its_last(
    models: tuple[Any, Any], reader: Any
) -> None:
    from agent.local.next_token import next_token_completion

    llama = models[1]
    first = chatml_prompt("book a table", CONVERSATION)
    longer = chatml_prompt("book a table for two people", CONVERSATION)
    before = next_token_completion(llama, first, reader=reader, top=5)
    after = next_token_completion(llama, longer, reader=reader, top=5)
    assert cached(after) == before["usage"]["prompt_tokens"]  # it went on from what was kept
    again = next_token_completion(llama, first, reader=reader, top=5)  # a prefix of what is kept
    assert cached(again) == again["usage"]["prompt_tokens"] - 1
    assert_same_completion(again, before)
    assert after["choices"][0]["logprobs"] != before["choices"][0]["logprobs"]


def test_each_caller_reads_on_from_its_own_prompt_and_the_least_recent_gives_way(
    models: tuple[Any, Any], slots: Any
) -> None:
    """Three sequences, four callers taking turns as calls do: each caller's next question
    reads only its new words while the sequences last, the fourth takes the sequence of the
    caller that asked least recently, and every answer is the one a fresh read gives."""
    from agent.local.next_token import next_token_completion
    from agent.local.question_slots import SharedContext

    llama, fresh = models[1], SharedContext(models[0])

    def ask(caller: str, words: str) -> dict[str, Any]:
        prompt = chatml_prompt(words, CONVERSATION)
        ours = next_token_completion(llama, prompt, reader=slots, caller=caller, top=5)
        assert_same_completion(ours, next_token_completion(llama, prompt, reader=fresh, top=5))
        return ours

    talks = {
        "a": ("can you tell me", "can you tell me the opening hours"),
        "b": ("i would like to", "i would like to book a table"),
        "c": ("stop", "stop the music please"),
    }
    first = {caller: ask(caller, words) for caller, (words, _) in talks.items()}
    for caller in ("b", "c", "a"):  # "b" now asked least recently
        later = ask(caller, talks[caller][1])
        assert cached(later) == first[caller]["usage"]["prompt_tokens"], caller
    ask("d", "what time is it")  # takes "b"'s sequence
    a_again = ask("a", talks["a"][1] + " today")
    assert cached(a_again) > first["a"]["usage"]["prompt_tokens"]  # "a" kept its own
    b_again = ask("b", talks["b"][1])
    assert cached(b_again) < first["b"]["usage"]["prompt_tokens"]  # "b" lost its own


def test_an_empty_or_too_long_prompt_is_refused_with_what_to_change(
    models: tuple[Any, Any], reader: Any
) -> None:
    from agent.local.next_token import next_token_completion
    from agent.local.question_slots import PromptTooLong

    llama = models[1]
    with pytest.raises(ValueError, match="prompt is empty"):
        next_token_completion(llama, "", reader=reader, top=5)
    with pytest.raises(PromptTooLong, match="exceed context window of 1024"):
        next_token_completion(llama, "word " * 2000, reader=reader, top=5)
    ok = next_token_completion(llama, chatml_prompt("stop", CONVERSATION), reader=reader, top=5)
    assert ok["choices"][0]["logprobs"]["top_logprobs"]  # the model is unharmed
