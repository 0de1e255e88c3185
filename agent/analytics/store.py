"""The analytics calls this process knows: running ones (for the live view) and the last
ended ones (for search), and the hand-off of each ended call to the post-call step."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from agent.analytics.conversation import Conversation
from agent.calls import Call


class AnalyticsCalls:
    """Conversations by call id; ``history`` ended ones are kept, oldest dropped first."""

    def __init__(
        self, *, redacting: bool, history: int, on_ended: Callable[[Call], None] | None = None
    ) -> None:
        self.redacting = redacting
        self._running: dict[str, Conversation] = {}
        self._ended: deque[Conversation] = deque(maxlen=history)
        self._on_ended = on_ended

    def open(self, call: Call) -> Conversation:
        conversation = Conversation(call, redacting=self.redacting)
        self._running[call.id] = conversation
        return conversation

    def close(self, conversation: Conversation) -> None:
        """The stream is over and its record final (the call has released its slot)."""
        self._running.pop(conversation.call.id, None)
        self._ended.append(conversation)
        if self._on_ended is not None:
            self._on_ended(conversation.call)

    def running(self) -> list[Conversation]:
        return list(self._running.values())

    def find(self, call_id: str) -> Conversation | None:
        return self._running.get(call_id) or next(
            (c for c in self._ended if c.call.id == call_id), None
        )

    def all(self) -> Iterable[Conversation]:
        yield from self._running.values()
        yield from self._ended


def matches(
    record: dict[str, Any], *, text: str | None, since: float | None, until: float | None
) -> bool:
    """Whether a call record was running in ``[since, until]`` (Unix seconds) and, with
    ``text``, says it (case-insensitive, in an utterance, a turn or the summary)."""
    started = float(record.get("started_at") or 0.0)
    ended = record.get("ended_at")
    if until is not None and started > until:
        return False
    if since is not None and ended is not None and float(ended) < since:
        return False
    if not text:
        return True
    needle = text.lower()
    said = [u.get("text", "") for u in record.get("utterances") or []]
    said += record.get("user_transcript") or []
    said += record.get("bot_transcript") or []
    analysis = record.get("analysis") or {}
    said += [str(analysis.get("summary") or ""), str(analysis.get("reason") or "")]
    return any(needle in piece.lower() for piece in said)
