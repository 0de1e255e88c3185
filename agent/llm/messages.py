"""Reading OpenAI-style chat messages, as Pipecat's ``LLMContext`` holds them."""

from __future__ import annotations

from collections.abc import Mapping


def message_text(message: Mapping[str, object]) -> str | None:
    """The text of a message: its content, or its text parts joined; ``None`` without any."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return " ".join(p for p in parts if isinstance(p, str)) or None
    return None
