"""An interpreted session's notices are spoken in each party's language: translated once per
language by the session's chat model, off the call's path; as written (English) until then,
and whenever the model cannot help."""

from __future__ import annotations

import re
from typing import Any

from openai import AsyncOpenAI

from agent.config import TranslationSettings
from agent.interpreter.notices import JOINED, NOTICES, PEER_LEFT, WAITING, NoticeTranslations
from agent.llm.translation import TranslationSpec, Translator
from tests.fakes.chat_server import ChatServer
from tests.fakes.serving import free_port


def tagged(messages: list[dict[str, Any]]) -> str:
    """The fake model: the text, marked with the language the instruction asks for."""
    target = re.search(r"into (\w+)", str(messages[0]["content"]))
    assert target is not None, messages[0]
    return f"[{target.group(1)}] {messages[-1]['content']}"


def notices_from(base_url: str) -> NoticeTranslations:
    def translator_into(language: str) -> Translator:
        spec = TranslationSpec("English", language, TranslationSettings().instruction)
        client = AsyncOpenAI(api_key="not-needed", base_url=base_url)
        return Translator(client, model="chat-server", spec=spec, timeout_s=5)

    return NoticeTranslations(translator_into)


async def test_each_language_is_asked_once_and_its_notices_are_kept() -> None:
    with ChatServer(script=tagged) as chat:
        notices = notices_from(chat.base_url)
        for language in ("French", "french", "English", "German"):
            notices.prepare(language)
        assert notices.text(JOINED, "French") == JOINED  # not translated yet: as written
        await notices.wait()
    assert notices.text(JOINED, "FRENCH") == f"[French] {JOINED}"
    assert notices.text(WAITING, "German") == f"[German] {WAITING}"
    assert notices.text(PEER_LEFT, "english") == PEER_LEFT  # written in it
    assert notices.text(PEER_LEFT, "Dutch") == PEER_LEFT  # never asked for
    asked = sorted(request["messages"][-1]["content"] for request in chat.requests)
    assert asked == sorted(NOTICES * 2)  # French and German, once each


async def test_a_model_that_is_down_leaves_them_as_written_and_a_later_session_asks_again() -> None:
    port = free_port()
    notices = notices_from(f"http://127.0.0.1:{port}/v1")
    notices.prepare("Spanish")
    await notices.wait()  # failed, without raising
    assert [notices.text(notice, "Spanish") for notice in NOTICES] == list(NOTICES)
    with ChatServer(script=tagged, port=port):
        notices.prepare("Spanish")
        await notices.wait()
    assert notices.text(WAITING, "Spanish") == f"[Spanish] {WAITING}"
