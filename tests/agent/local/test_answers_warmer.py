"""The answers' context reads each call's latest question too, once its lock is free: the
answer after a question then reads only what is new, as when the question was read there."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from agent.turns.text_end_of_turn import chatml_prompt
from tests.conftest import requires_local_llm

pytestmark = requires_local_llm

CONVERSATION = [("system", "Be brief."), ("assistant", "Hello! How can I help?")]


@pytest.fixture(scope="module")
def llama() -> Iterator[Any]:
    from llama_cpp import Llama

    from agent.local.llm_server import packaged_model

    model = Llama(str(packaged_model()), n_ctx=512, n_threads=2, verbose=False)
    yield model
    model.close()


class AnswersLock:
    """The answers' lock as llama-cpp-python's server holds it, counting who held it."""

    def __init__(self, llama: Any) -> None:
        self.lock = asyncio.Lock()
        self.held = 0
        self._proxy = lambda: llama
        self._released = asyncio.Event()

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[Any]:
        async with self.lock:
            self.held += 1
            try:
                yield self._proxy
            finally:
                self._released.set()

    async def released(self, times: int, within_s: float = 20.0) -> None:
        """Wait until the lock was held and let go ``times`` times."""
        async with asyncio.timeout(within_s):
            while self.held < times or self.lock.locked():
                self._released.clear()
                await self._released.wait()


def kept(llama: Any) -> list[int]:
    return [int(token) for token in llama._input_ids]


def tokens(llama: Any, prompt: str) -> list[int]:
    return [int(t) for t in llama.tokenize(prompt.encode(), special=True)]


async def test_a_question_is_read_into_the_answers_context_once_it_is_free(llama: Any) -> None:
    from agent.local.answers_warmer import AnswersWarmer

    llama.reset()
    answers = AnswersLock(llama)
    warmer = AnswersWarmer(answers)
    first = chatml_prompt("book a table", CONVERSATION)
    later = [*CONVERSATION, ("user", "Book a table."), ("assistant", "For how many?")]
    latest = chatml_prompt("for two", later)
    async with answers.lock:  # an answer is streaming
        warmer.after_question("call-a", first)
        warmer.after_question("call-a", latest)  # asked again meanwhile: only this is read
        await asyncio.sleep(0.2)
        assert kept(llama) == [] and answers.held == 0  # the answer is never held up
    await answers.released(1)
    assert kept(llama) == tokens(llama, chatml_prompt("", later))  # not the words as spoken
    await asyncio.sleep(0.2)
    assert answers.held == 1


async def test_each_waiting_call_is_read_in_turn_and_a_failure_harms_none(llama: Any) -> None:
    from agent.local.answers_warmer import AnswersWarmer

    llama.reset()
    answers = AnswersLock(llama)
    warmer = AnswersWarmer(answers)
    too_long = chatml_prompt("hello", [("system", "word " * 600)])
    async with answers.lock:
        warmer.after_question("call-a", too_long)  # longer than the context: refused, logged
        warmer.after_question("call-b", chatml_prompt("what time is it", CONVERSATION))
    await answers.released(2)
    assert kept(llama) == tokens(llama, chatml_prompt("", CONVERSATION))


async def test_a_read_ahead_is_left_to_the_question(llama: Any) -> None:
    """A read-ahead (the conversation open for words not yet spoken) has no answer right after
    it: read into the answers' context, another call's answer would evict it first."""
    from agent.local.answers_warmer import AnswersWarmer

    llama.reset()
    answers = AnswersLock(llama)
    AnswersWarmer(answers).after_question("call-a", chatml_prompt("", CONVERSATION))
    await asyncio.sleep(0.3)
    assert answers.held == 0 and kept(llama) == []


def test_the_answers_read_a_question_up_to_the_open_user_message() -> None:
    """The question's words are written as spoken ("what time is it"), the answer's user
    message as recognized ("What time is it?"): only the conversation before them is shared."""
    from agent.local.answers_warmer import answers_prefix

    conversation = chatml_prompt("", CONVERSATION)
    assert answers_prefix(chatml_prompt("what time is it", CONVERSATION)) == conversation
    assert answers_prefix(conversation) == conversation
    assert answers_prefix("The sky is") == "The sky is"  # not ChatML: all of it
