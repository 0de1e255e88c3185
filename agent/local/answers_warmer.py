"""Read each call's latest question into the answers' context too, when that context is free.

A question read in the call's own sequence (:class:`~agent.local.question_slots.QuestionSlots`)
leaves the answers' context as it was: its one kept prompt may be another call's, and the
answer that follows the question would read the whole conversation again, at about 140 tokens
a second on one thread (``bench/results/text_model_calls.md``: with two calls, the answers'
first token p50 went from 133 ms to 1.7 s). On the answers' context the question used to do
that reading for the answer. :class:`AnswersWarmer` does it again, off the question's path:
after the question is answered, the conversation it was asked in is read into the answers'
context once its lock is free, so the answer after it reads only the user's message; an answer
already under way is never held by it. One prompt per caller waits, the latest.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from loguru import logger
from starlette.concurrency import run_in_threadpool

from agent.local.question_slots import SharedContext

LockedModel = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
"""Holds the answers' lock while entered, giving the model (llama-cpp-python's ``LlamaProxy``:
called, it returns the ``Llama``)."""


class AnswersWarmer:
    """Reads prompts into the answers' context in the background, one at a time, oldest
    caller first."""

    def __init__(self, locked_model: LockedModel) -> None:
        self._locked_model = locked_model
        self._waiting: OrderedDict[str | None, str] = OrderedDict()
        self._worker: asyncio.Task[None] | None = None

    def after_question(self, caller: str | None, prompt: str) -> None:
        """``caller`` asked about the words at the end of ``prompt``: have the conversation
        before them read into the answers' context soon (replacing ``caller``'s still waiting,
        if any). A read-ahead, which ends at the open user message, is left out: no answer
        follows it soon, and before then another call's answer would evict it (with two calls
        reading it early cost their answers' first token more than it saved). Call on the
        server's event loop."""
        if answers_prefix(prompt) == prompt:
            return
        self._waiting.pop(caller, None)
        self._waiting[caller] = prompt
        if self._worker is None or self._worker.done():
            self._worker = asyncio.get_running_loop().create_task(self._read_waiting())

    async def _read_waiting(self) -> None:
        while self._waiting:
            _, prompt = self._waiting.popitem(last=False)
            try:
                async with self._locked_model() as proxy:
                    await run_in_threadpool(_read, proxy(), answers_prefix(prompt))
            except Exception as error:  # the answer will read it itself
                logger.warning(f"llm_app: the answers' context did not read ahead: {error!r}")


OPEN_USER_MESSAGE = "<|im_start|>user\n"
"""Where ChatML opens the user's message: the question's words after it are written as spoken
(lower case, no marks: :func:`agent.turns.text_end_of_turn.as_spoken`), and the answer's user
message never starts with them."""


def answers_prefix(prompt: str) -> str:
    """The part of a question's ``prompt`` the answer after it shares: up to the open user
    message (reading the spoken words would only delay the answer, which reads its own)."""
    opened = prompt.rfind(OPEN_USER_MESSAGE)
    return prompt if opened < 0 else prompt[: opened + len(OPEN_USER_MESSAGE)]


def _read(llama: Any, prompt: str) -> None:
    """Read ``prompt`` as the answer's completion will tokenize it, after what is kept (if
    anything is left to read: a call's question after its read-ahead shares its prefix)."""
    tokens = llama.tokenize(prompt.encode("utf-8"), special=True)
    if llama.longest_token_prefix(llama._input_ids.tolist(), tokens) < len(tokens):
        SharedContext(llama).last_logits(tokens)
