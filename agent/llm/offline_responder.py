"""The echo responder (``llm.kind = "echo"``): answers with no language model at all.

It answers every user turn by repeating what the recognizer understood -- "You said: what is
the weather like in Paris today." -- which makes the whole audio path (VAD → STT → turn
taking → TTS → transport, barge-in included) usable and testable with a deterministic answer
and no model server. It is also what ``voice-agent serve`` falls back to when the default
profile's local model cannot run (llama-cpp-python not installed).

It speaks the same frames as a Pipecat LLM service: it consumes the ``LLMContextFrame``
the user aggregator pushes at the end of a turn and answers with
``LLMFullResponseStartFrame``, a few ``LLMTextFrame`` tokens and ``LLMFullResponseEndFrame``,
so the TTS sentence aggregation and the assistant aggregator behave exactly as with an LLM.
Like Pipecat's ``LLMService`` it routes what it pushes through a
:class:`~pipecat.turns.speculation_gate.SpeculationGate`: an answer to a speculative context
(an eager end of turn) is held until the turn is confirmed and dropped if it is withdrawn, so
the offline profile never speaks an answer to words the user had not finished.
"""

from __future__ import annotations

import re
from typing import Any

from pipecat.frames.frames import (
    Frame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.turns.speculation_gate import SpeculationGate

from agent.llm.messages import message_text

DEFAULT_TEMPLATE = "You said: {text}."
NOTHING_HEARD = "Sorry, I did not catch that."


class OfflineResponder(FrameProcessor):
    """Answers each user turn from its transcript, in place of an LLM.

    Args:
        template: The answer, with ``{text}`` replaced by the user's last message.
        nothing_heard: The answer when the last user message is empty.
    """

    def __init__(
        self,
        *,
        template: str = DEFAULT_TEMPLATE,
        nothing_heard: str = NOTHING_HEARD,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if "{text}" not in template:
            raise ValueError("template must contain '{text}', e.g. 'You said: {text}.'")
        self._template = template
        self._nothing_heard = nothing_heard
        self._speculation_gate = SpeculationGate(name=f"{self}::SpeculationGate")

    def answer(self, user_text: str) -> str:
        """The reply to one user message (tidied: no trailing punctuation doubled)."""
        text = " ".join(user_text.split()).rstrip(" .!?")
        if not text:
            return self._nothing_heard
        return self._template.format(text=text)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMContextFrame):
            self._speculation_gate.begin_speculation(frame.speculation)
            await self._respond(frame.context)
        else:
            await self.push_frame(frame, direction)

    async def push_frame(
        self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM
    ) -> None:
        """Everything leaves through the speculation gate, as from Pipecat's ``LLMService``."""
        for gated_frame, gated_direction in self._speculation_gate.process(frame, direction):
            await super().push_frame(gated_frame, gated_direction)

    async def _respond(self, context: LLMContext) -> None:
        reply = self.answer(last_user_text(context))
        await self.push_frame(LLMFullResponseStartFrame())
        for token in _tokens(reply):
            await self.push_frame(LLMTextFrame(token))
        await self.push_frame(LLMFullResponseEndFrame())


def last_user_text(context: LLMContext) -> str:
    """The text of the newest ``user`` message in the context ('' if there is none)."""
    for message in reversed(context.get_messages()):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message) or ""
    return ""


def _tokens(text: str) -> list[str]:
    """Word-sized pieces with their leading spaces, the way an LLM streams."""
    return re.findall(r"\s*\S+", text)
