"""The offline responder answers from the transcript with the frames an LLM service sends."""

from __future__ import annotations

import pytest
from pipecat.frames.frames import (
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test

from agent.llm import OfflineResponder


async def reply_to(messages: list[dict[str, object]]) -> str:
    context = LLMContext(messages=messages)  # type: ignore[arg-type]
    down, _ = await run_test(OfflineResponder(), frames_to_send=[LLMContextFrame(context)])
    kinds = [type(f) for f in down]
    assert kinds[0] is LLMFullResponseStartFrame and kinds[-1] is LLMFullResponseEndFrame
    assert set(kinds[1:-1]) == {LLMTextFrame}
    return "".join(f.text for f in down if isinstance(f, LLMTextFrame))


async def test_repeats_the_last_user_message() -> None:
    reply = await reply_to(
        [
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "You said: hello."},
            {"role": "user", "content": " what is the weather like in paris today? "},
        ]
    )
    assert reply == "You said: what is the weather like in paris today."


async def test_reads_text_parts_and_handles_silence() -> None:
    parts = [{"type": "text", "text": "turn on"}, {"type": "text", "text": "the lights"}]
    assert await reply_to([{"role": "user", "content": parts}]) == "You said: turn on the lights."
    assert await reply_to([]) == "Sorry, I did not catch that."


def test_template_must_hold_the_text() -> None:
    with pytest.raises(ValueError, match="text"):
        OfflineResponder(template="Hello")
