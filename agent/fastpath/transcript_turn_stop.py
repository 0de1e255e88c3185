"""End of turn that listens to what was said: wait longer when the words so far are unfinished.

People pause 300-900 ms inside sentences; a 200 ms silence rule ends their turn there. This
strategy is Pipecat's speech-timeout rule plus one look at the transcript at the moment the
turn would end: if the words so far trail off ("…, and", "so", "um", a number being read out,
a comma), it waits ``unfinished_wait_s`` longer (once per pause) for the person to go on; a
new word from them cancels the end as usual. A complete-looking turn (a question mark, a full
stop after a content word) ends as fast as before. The extra wait is the hard upper bound.

Mirrors ``pipecat.turns.user_stop.SpeechTimeoutUserTurnStopStrategy`` (Pipecat 1.14.0), whose
private state it reads (``_text``, ``_vad_user_speaking``, ``_user_speech_wait_done``,
``_stt_wait_done``) and whose ``_maybe_trigger_user_turn_stopped`` and
``_discard_pending_end_of_turn`` it extends. Measured: ``bench/turn_taking.py``.
"""

from __future__ import annotations

import asyncio
import re

from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy

TRAILING_WORDS = frozenset(
    "and or but so because um uh er erm hmm like the a an to of for with from in on at is "
    "are was my your our their if then that which who when while um-hmm well".split()
)
"""Words a finished sentence rarely ends on: conjunctions, fillers, articles, prepositions."""

NUMBER_WORDS = frozenset(
    "zero oh one two three four five six seven eight nine ten eleven twelve twenty thirty "
    "forty fifty sixty seventy eighty ninety hundred".split()
)


def looks_unfinished(text: str) -> bool:
    """Whether the words so far trail off rather than end."""
    text = text.strip()
    if not text or text.endswith("?"):
        return False
    if text.endswith((",", "...", "…", "-", ";", ":")):
        return True
    words = re.findall(r"[a-z0-9']+", text.lower())
    if not words:
        return False
    if words[-1] in TRAILING_WORDS:
        return True
    numbers = 0  # a number being read out: several in a row, or one without a full stop
    for word in reversed(words):
        if not (word in NUMBER_WORDS or word.isdigit()):
            break
        numbers += 1
    return numbers >= 2 or (numbers == 1 and not text.endswith((".", "!")))


class TranscriptAwareUserTurnStopStrategy(SpeechTimeoutUserTurnStopStrategy):
    """Pipecat's speech timeout, with ``unfinished_wait_s`` more when the words trail off."""

    def __init__(self, *, unfinished_wait_s: float = 0.7, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._unfinished_wait_s = unfinished_wait_s
        self._waited = False
        self._extra_wait: asyncio.Task[None] | None = None

    async def _discard_pending_end_of_turn(self) -> None:
        await super()._discard_pending_end_of_turn()
        self._waited = False
        if self._extra_wait is not None:
            await self.task_manager.cancel_task(self._extra_wait)
            self._extra_wait = None

    async def _maybe_trigger_user_turn_stopped(self) -> None:
        if self._vad_user_speaking or (self._wait_for_transcript and not self._text):
            return
        if not (self._user_speech_wait_done and self._stt_wait_done):
            return
        if self._extra_wait is not None:
            return  # already waiting for more words
        if not self._waited and looks_unfinished(self._text):
            self._waited = True
            self._extra_wait = self.task_manager.create_task(
                self._wait_for_more(), f"{self}::_wait_for_more"
            )
            return
        await self.trigger_user_turn_stopped()

    async def _wait_for_more(self) -> None:
        try:
            await asyncio.sleep(self._unfinished_wait_s)
        except asyncio.CancelledError:
            return
        self._extra_wait = None
        await self._maybe_trigger_user_turn_stopped()
