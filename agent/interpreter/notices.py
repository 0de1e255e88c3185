"""The interpreted session's spoken notices, in each party's own language.

A party is told to hold, that the other party joined, and that it left (:data:`NOTICES`). Those
are written in English, and a party that does not share a language with the other one may not
share English either, so each notice is translated into the party's language by the same chat
model that translates the session (one request per notice and language, made when the
session is created so that a call never waits for it) and kept for every later session in
that language. Until the translation is there, or when the model fails, the party hears the
English notice: a notice must never hold up or break a call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from loguru import logger

from agent.llm.translation import TranslationError, Translator

WAITING: Final = "Please hold: the other party has not joined yet."
JOINED: Final = "The other party has joined. You can speak now."
PEER_LEFT: Final = "The other party has left the call. Goodbye."
NOTICES: Final = (WAITING, JOINED, PEER_LEFT)

NOTICE_LANGUAGE: Final = "English"
"""The language the notices are written in (no translation is asked for it)."""
MAX_LANGUAGES: Final = 64
"""Languages whose notices are kept (a bound on what a leaked operator token can fill)."""


class NoticeTranslations:
    """The notices in each language asked for so far.

    Args:
        translator_into: A :class:`Translator` from :data:`NOTICE_LANGUAGE` into a language.
    """

    def __init__(self, translator_into: Callable[[str], Translator]) -> None:
        self._translator_into = translator_into
        self._done: dict[str, dict[str, str]] = {}
        self._asked: dict[str, asyncio.Task[None]] = {}

    def prepare(self, language: str) -> None:
        """Start translating the notices into ``language`` (once per language), off the
        caller's path."""
        key = language.casefold()
        if key == NOTICE_LANGUAGE.casefold() or key in self._asked:
            return
        if len(self._asked) >= MAX_LANGUAGES:
            return
        self._asked[key] = asyncio.get_running_loop().create_task(
            self._translate(key, language), name=f"interpreter-notices-{key}"
        )

    def text(self, notice: str, language: str) -> str:
        """``notice`` in ``language`` if its translation is ready, else as written."""
        return self._done.get(language.casefold(), {}).get(notice, notice)

    async def wait(self) -> None:
        """Until every translation asked for so far is done (or has failed)."""
        await asyncio.gather(*self._asked.values(), return_exceptions=True)

    async def _translate(self, key: str, language: str) -> None:
        translator = self._translator_into(language)
        translated: dict[str, str] = {}
        try:
            for notice in NOTICES:
                text = "".join([piece async for piece in translator.stream(notice)]).strip()
                if text:
                    translated[notice] = text
        except TranslationError as exc:
            logger.warning(f"interpreter: notices stay in English for {language!r}: {exc}")
            del self._asked[key]  # the next session in this language asks again
            return
        self._done[key] = translated
        logger.info(f"interpreter: notices translated into {language!r}")
