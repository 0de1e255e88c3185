"""A turn's VAD segments as the recognizer wrote them, and whether the caller hesitated
before the last words (:class:`~agent.turns.adaptive_stop.AdaptiveUserTurnStopStrategy`'s
``paused_turns_wait``)."""

from __future__ import annotations

from agent.turns.completeness import ends_unfinished


class TurnSegments:
    """The transcripts of this turn's segments, in order (one per VAD segment, possibly
    empty), and what they say of a hesitation: read a segment at a time as they come, so a
    long turn costs each final transcript its own words, not the whole turn's again (with the
    whole turn read on every final, 200 segments without marks took 109 ms per final;
    ``bench/results/turn_words_cost.md``)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._read = 0  # segments read into _heard
        self._heard = ""
        self._hesitated = False

    def append(self, text: str) -> None:
        self.texts.append(text)

    def hesitated_before_last_words(self) -> bool:
        """Whether, before its last segment with words, the turn paused after words that stop
        unfinished ("Um.", "So.", "I would like to") or after a segment with no words (a
        recognizer may drop the "um"). A pause after a finished sentence is not one, nor a
        sound after the last words (a segment with none comes after them)."""
        last_words = max((i for i, text in enumerate(self.texts) if text.strip()), default=0)
        while not self._hesitated and self._read < last_words:
            text = self.texts[self._read]
            self._read += 1
            if not text.strip():
                self._hesitated = True
            else:
                self._heard = f"{self._heard} {text}".strip()
                self._hesitated = ends_unfinished(self._heard)
        return self._hesitated
