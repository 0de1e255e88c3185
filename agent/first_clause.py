"""Speak an answer's first clause as soon as it is written, not its first whole sentence.

A TTS server that answers each request with a whole WAV (Piper's) starts to sound only once
it has synthesised everything it was sent, so the first request's length is the first
audio's delay. Pipecat's ``TTSService`` sends whole sentences (``SimpleTextAggregator``);
this aggregator sends the first clause of each answer on its own ("You said:", "Sure, ...")
when it has at least ``min_words`` words and ends in ``,``, ``;`` or ``:`` followed by a
space, then goes back to whole sentences. Only the first piece is split: the rest are
synthesised while the first plays, so they are never waited for, and whole sentences keep
the voice's intonation.

That holds only while the engine synthesises much faster than real time: a first clause
plays for about 0.7 s, and if the rest takes longer than that to synthesise the caller hears
a gap. So the split is made only while ``split_allowed()`` says so (the Piper service asks
its measured real-time factor, :class:`RealTimeFactor`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from pipecat.utils.text.base_text_aggregator import Aggregation, TextType
from pipecat.utils.text.simple_text_aggregator import SimpleTextAggregator

CLAUSE_PUNCTUATION = frozenset(",;:")


class FirstClauseTextAggregator(SimpleTextAggregator):
    """Sentences, except that each answer's first clause is released on its own."""

    def __init__(
        self,
        *,
        min_words: int = 2,
        split_allowed: Callable[[], bool] = lambda: True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if min_words < 1:
            raise ValueError("min_words must be at least 1")
        self._min_words = min_words
        self._split_allowed = split_allowed
        self._first_released = False

    async def aggregate(self, text: str) -> AsyncIterator[Aggregation]:
        if self._first_released or self._aggregation_type == TextType.TOKEN:
            async for aggregation in super().aggregate(text):
                self._first_released = True
                yield aggregation
            return
        for index, char in enumerate(text):
            clause = self._first_clause(char)
            if clause is not None:
                self._first_released = True
                yield clause
                async for aggregation in super().aggregate(text[index + 1 :]):
                    yield aggregation
                return
            self._text += char
            sentence = await self._check_sentence_with_lookahead(char)
            if sentence is not None:
                self._first_released = True
                yield sentence
                async for aggregation in super().aggregate(text[index + 1 :]):
                    yield aggregation
                return

    def _first_clause(self, char: str) -> Aggregation | None:
        """The buffered clause, taken out of the buffer, if ``char`` (a space) ends it."""
        if not char.isspace() or not self._text or self._text[-1] not in CLAUSE_PUNCTUATION:
            return None
        clause = self._text.strip()
        if len(clause.split()) < self._min_words or not self._split_allowed():
            return None
        self._text = ""
        return Aggregation(text=clause, type=TextType.SENTENCE)

    async def flush(self) -> Aggregation | None:
        """The answer's last words; the next answer starts with a first clause again."""
        self._first_released = False
        return await super().flush()

    async def reset(self) -> None:
        await super().reset()
        self._first_released = False

    async def handle_interruption(self) -> None:
        await super().handle_interruption()
        self._first_released = False


class RealTimeFactor:
    """Seconds of synthesis per second of audio, averaged over recent requests.

    ``fast_enough()`` is true until a request has been measured, then while the average is
    at most ``limit``: at 0.25, the rest of a 3 s sentence is ready before a 0.7 s first
    clause has played (Piper's medium voice runs at about 0.03 on two idle cores; on a busy
    machine it was measured at 0.3, where splitting left 0.1-0.4 s gaps).
    """

    def __init__(self, *, limit: float = 0.25, weight: float = 0.3) -> None:
        self.limit = limit
        self._weight = weight
        self.value: float | None = None

    def add(self, synthesis_s: float, audio_s: float) -> None:
        if audio_s <= 0:
            return
        sample = synthesis_s / audio_s
        previous = sample if self.value is None else self.value
        self.value = (1 - self._weight) * previous + self._weight * sample

    def fast_enough(self) -> bool:
        return self.value is None or self.value <= self.limit
