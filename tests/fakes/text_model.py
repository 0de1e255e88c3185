"""A text end-of-turn model with :class:`~agent.turns.text_end_of_turn.TextEndOfTurn`'s
interface and no server: it answers the p(end) it is given for each text, after a delay (the
server's time), and ``None`` where the real client gives no opinion (its timeout, a failure).
For tests on virtual time (:mod:`tests.fakes.virtual_time`), where a real socket's answer
could not be placed at a drawn moment."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.turns.text_end_of_turn import Conversation, TextEndOfTurn


class ScriptedTextModel(TextEndOfTurn):
    """Says ``p_for(text)`` to every :meth:`probability`, ``delay_s`` after being asked, and
    records what it was asked."""

    def __init__(self, p_for: Callable[[str], float | None], delay_s: float = 0.0) -> None:
        super().__init__("http://127.0.0.1:9/v1", "scripted", timeout_s=max(delay_s, 0.001))
        self.p_for, self.delay_s = p_for, delay_s
        self.asked: list[str] = []

    async def probability(
        self, user_text: str, conversation: Conversation = (), timeout_s: float | None = None
    ) -> float | None:
        """``p_for(user_text)`` after ``delay_s``, whatever the limit: the drawn delays stay
        under every limit the strategy sets."""
        self.asked.append(user_text)
        await asyncio.sleep(self.delay_s)
        return self.p_for(user_text)

    async def prime(self, conversation: Conversation) -> None:
        """Nothing to read ahead: the script needs no conversation."""
