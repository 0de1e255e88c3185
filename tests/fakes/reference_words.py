"""The words a multilingual recognizer would write for the utterance being played: a stand-in
for Voxtral on the turn-taking bench, behind :class:`~tests.fakes.realtime_peer.RealtimePeer`.

The offline recognizer (tiny.en) is English-only: for German, French and Spanish it writes no
words, or English ones, so the bench's non-English rows measured the recognizer more than the
turn decision. Voxtral writes those languages' words, which cannot run here; this stand-in
writes the script's own words instead, so the rows measure what the product decides from the
audio and from words as Voxtral would give them.

How it writes, and why:

- A generation (one VAD segment, from the STT's first commit to its final one) gets the words
  whose audio ended before its final commit and that no earlier generation got. The caller's
  phrase timings are known to the bench (it plays them on a paced line), so no guess is made
  from the audio; a talker behind the caller is never written. Inside a phrase, a word is
  taken to end where its last letter falls when the phrase's letters are spread evenly over
  its audio: a VAD that stops at a gap inside a phrase ("cancel | it", a short VAD wait, a dip
  under babble) thus gets the words before the gap, as a recognizer writes the part it heard
  (a word or so either way; the last word of a phrase ends exactly with its audio).
- Each generation's words are closed the way a recognizer closes a fragment heard before
  silence: with a full stop, and with a question mark only after the last word of a question.
  A fragment at a pause ("Book a table.") thus looks finished, as tiny.en writes it too. An
  "unmarked question" (``--set unmarked-questions``) gets a full stop too: a recognizer that
  dropped its mark.
- The final comes ``final_delay_s`` after the final commit
  (:attr:`~tests.fakes.realtime_peer.RealtimePeer.final_delay_s`): Voxtral's text lags its
  audio by its transcription delay (480 ms by default), and the STT's final commit comes at the
  VAD stop, 0.2 s after the end of speech, so 0.3 s puts the final 0.5 s after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.fakes.paused_speech import Utterance
from tests.fakes.realtime_peer import Generation

TIMING_RATE = 8000
"""The rate the phrase lengths are read at (the phone line's; any rate gives the same times)."""


def word_ends_s(utterance: Utterance, sample_rate: int = TIMING_RATE) -> list[float]:
    """When each of the utterance's words ends, in seconds from its first sample: by its last
    letter's place in its phrase, the phrase's letters spread evenly over its audio."""
    ends: list[float] = []
    for phrase, (start, end) in zip(
        utterance.phrases, utterance.phrase_spans_s(sample_rate), strict=True
    ):
        letters = 0
        for word in phrase.split():
            letters += len(word) if letters == 0 else len(word) + 1
            ends.append(start + (end - start) * letters / len(phrase))
    return ends


def written(utterance: Utterance, first: int, last: int) -> str:
    """Words ``first`` to ``last`` (exclusive) as a recognizer closes them before silence."""
    all_words = utterance.text.split()
    text = " ".join(all_words[first:last])
    question = utterance.kind == "question" and last == len(all_words)
    return text[:1].upper() + text[1:] + ("?" if question else ".")


@dataclass
class ReferenceWords:
    """``peer = RealtimePeer(transcribe=words.transcribe)``; ``words.play(u, began)`` per call."""

    utterance: Utterance | None = None
    ends_at: list[float] = field(default_factory=list)
    """When each word ended on the caller's side (``time.monotonic()``)."""
    given: int = 0
    """Words already written into an earlier generation of this call."""

    def play(self, utterance: Utterance, began: float) -> None:
        """The caller starts ``utterance`` at ``began``; earlier calls' words are forgotten."""
        self.utterance = utterance
        self.ends_at = [began + end for end in word_ends_s(utterance)]
        self.given = 0

    @property
    def unwritten(self) -> int:
        """The words of this call's utterance no generation has written: after the call, a
        tail the VAD never heard as speech (no segment, so no generation, ever held it)."""
        return len(self.ends_at) - self.given

    def transcribe(self, generation: Generation) -> str:
        """The words this generation heard end, none twice."""
        if self.utterance is None or generation.committed_at is None:
            return ""
        heard = sum(end <= generation.committed_at for end in self.ends_at)
        if heard <= self.given:
            return ""
        text = written(self.utterance, self.given, heard)
        self.given = heard
        return text
