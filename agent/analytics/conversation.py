"""One analytics call's conversation: who said what, when, as it arrives.

A listen-only stream carries two tracks; each is its own speaker (``inbound``: the caller,
``outbound``: the person who took the call). Each track's transcriber reports where speech
started and stopped in that track's audio and what was said (interim, then final); this puts
them together into utterances (speaker, start and end in seconds from the start of the stream,
text) on the call's record, and hands every change to whoever watches live (the operator's
page). Text is redacted before it is kept or shown (``analytics.redact``): the unredacted
words exist only inside the transcriber and this call's memory for the moment it takes to
redact them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from agent.analytics.redaction import redact, redact_partial
from agent.calls import Call

Speaker = Literal["caller", "agent"]
SPEAKERS: tuple[Speaker, ...] = ("caller", "agent")

TRACK_SPEAKERS: dict[str, Speaker] = {"inbound": "caller", "outbound": "agent"}
"""Carrier track → speaker: ``inbound`` is what the caller says to the carrier, ``outbound``
what the carrier plays to the caller (the agent's voice)."""

SUBSCRIBER_QUEUE = 1000
"""Live events a slow watcher may fall behind by; beyond it, it is dropped (not the call)."""


@dataclass(slots=True)
class Utterance:
    speaker: Speaker
    start_s: float
    end_s: float | None = None
    text: str = ""

    def as_record(self) -> dict[str, Any]:
        return {
            "speaker": self.speaker,
            "start_s": round(self.start_s, 3),
            "end_s": None if self.end_s is None else round(self.end_s, 3),
            "text": self.text,
        }


class Conversation:
    """The diarized transcript of one analytics call, kept on its :class:`Call`."""

    def __init__(self, call: Call, *, redacting: bool) -> None:
        self.call = call
        self._redacting = redacting
        self._utterances: list[Utterance] = []  # every speech stretch, words or not
        self._interim: dict[Speaker, str] = {}
        self._watchers: set[asyncio.Queue[dict[str, Any]]] = set()
        self.ended = False
        call.utterances = []
        call.attributes["redacted"] = "true" if redacting else "false"

    # ------------------------------------------------------------------ from the transcribers

    def speech_started(self, speaker: Speaker, at_s: float) -> None:
        self._utterances.append(Utterance(speaker, at_s))
        self._publish({"type": "speech", "speaker": speaker, "state": "started", "at_s": at_s})

    def speech_stopped(self, speaker: Speaker, at_s: float) -> None:
        open_ = self._latest(speaker, lambda u: u.end_s is None)
        if open_ is None:
            return
        open_.end_s = max(at_s, open_.start_s)
        self._publish({"type": "speech", "speaker": speaker, "state": "stopped", "at_s": at_s})

    def interim(self, speaker: Speaker, text: str) -> None:
        shown = redact_partial(text) if self._redacting else text
        self._interim[speaker] = shown
        self._publish({"type": "interim", "speaker": speaker, "text": shown})

    def final(self, speaker: Speaker, text: str) -> None:
        """A final transcript: it belongs to the speaker's latest stretch of speech that has
        stopped and has no words yet (the STT finishes one before the next is final)."""
        words = " ".join(text.split())
        self._interim.pop(speaker, None)
        if not words:
            return
        shown = redact(words) if self._redacting else words
        utterance = self._latest(speaker, lambda u: u.end_s is not None and not u.text)
        if utterance is None:
            utterance = self._latest(speaker, lambda u: not u.text)
        if utterance is None:  # no VAD stretch seen (it started before the stream did)
            utterance = Utterance(speaker, 0.0, 0.0)
            self._utterances.append(utterance)
        utterance.text = shown
        self._store()
        self._publish({"type": "utterance", **utterance.as_record()})

    def end(self) -> None:
        """The stream is over: close stretches still open, and tell the watchers."""
        for utterance in self._utterances:
            if utterance.end_s is None:
                utterance.end_s = utterance.start_s
        self.ended = True
        self._store()
        self._publish({"type": "ended", "end_reason": self.call.end_reason})

    def analysis_ready(self, analysis: dict[str, Any]) -> None:
        self._publish({"type": "analysis", "analysis": analysis})

    # ------------------------------------------------------------------ for the operator

    @property
    def utterances(self) -> list[Utterance]:
        """Utterances with words, in order of their start."""
        return sorted((u for u in self._utterances if u.text), key=lambda u: u.start_s)

    def snapshot(self) -> dict[str, Any]:
        """What a page that starts watching now is shown first."""
        return {
            "type": "snapshot",
            "call": self.call.as_record(),
            "interim": dict(self._interim),
            "speaking": {
                speaker: (open_.start_s if (open_ := self._latest(speaker, _is_open)) else None)
                for speaker in SPEAKERS
            },
            "stream_started_at": self.call.started_at,
            "now_s": time.time() - self.call.started_at,
        }

    @contextlib.contextmanager
    def watch(self) -> Iterator[asyncio.Queue[dict[str, Any]]]:
        """A queue of live events (after :meth:`snapshot`), for as long as the block runs."""
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(SUBSCRIBER_QUEUE)
        self._watchers.add(queue)
        try:
            yield queue
        finally:
            self._watchers.discard(queue)

    # ------------------------------------------------------------------ inside

    def _latest(self, speaker: Speaker, test: Callable[[Utterance], bool]) -> Utterance | None:
        return next(
            (u for u in reversed(self._utterances) if u.speaker == speaker and test(u)), None
        )

    def _store(self) -> None:
        self.call.utterances = [u.as_record() for u in self.utterances]

    def _publish(self, event: dict[str, Any]) -> None:
        for queue in list(self._watchers):
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:
                self._watchers.discard(queue)  # a watcher that stopped reading


def _is_open(utterance: Utterance) -> bool:
    return utterance.end_s is None
