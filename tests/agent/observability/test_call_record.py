"""The call-record observer fed synthetic frame pushes, as Pipecat's worker hands them over:
each frame's first push marked, the turn-latency observer called first.

What a record must say: what the caller said per turn, what the bot said *as played* (the
text frames the output transport pushes on after writing their audio), whether an answer
was cut off, and the turn's latency stages.
"""

from __future__ import annotations

import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    ErrorFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSStartedFrame,
    TTSTextFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import FramePushed
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from agent.analytics.redaction import redact
from agent.calls import CallRegistry
from agent.observability.call_record import MAX_ERRORS, CallRecordObserver
from agent.observability.metrics import STAGES
from agent.observability.turn_latency import TurnLatencyObserver
from tests.agent.observability.synthetic import DOWN, UP, Pipeline, audio


class Call:
    """One call's observers, fed pushes with Pipecat's first-push marking."""

    def __init__(self, *, redacting: bool = False) -> None:
        self.call = CallRegistry(max_calls=1).reserve("twilio")
        self.latency = TurnLatencyObserver(call_id=self.call.id, log_turns=False)
        self.record = CallRecordObserver(
            self.call, latency=self.latency, redact=redact if redacting else None
        )
        self.p = Pipeline()
        self.now = 0.0
        self._seen: set[int] = set()

    async def push(
        self, source: FrameProcessor, frame: Frame, direction: FrameDirection = DOWN
    ) -> None:
        self.now += 10
        data: FramePushed = self.p.push(source, frame, self.now, direction)
        data.first_push = frame.id not in self._seen
        self._seen.add(frame.id)
        await self.latency.on_push_frame(data)
        await self.record.on_push_frame(data)

    async def user_says(self, text: str | None) -> None:
        await self.push(self.p.vad, VADUserStartedSpeakingFrame(start_secs=0.2))
        await self.push(self.p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2))
        if text is not None:
            await self.push(self.p.stt, TranscriptionFrame(text, "u", "now"))

    async def answer(self, sentences: list[str], *, play: int, context: str) -> None:
        """The LLM answers ``sentences``; the TTS speaks them all; the caller hears the first
        ``play`` of them (the output transport pushes on only those)."""
        p = self.p
        await self.push(p.llm, LLMFullResponseStartFrame())
        await self.push(p.llm, LLMTextFrame(" ".join(sentences)))
        await self.push(p.llm, LLMFullResponseEndFrame())
        await self.push(p.tts, TTSStartedFrame(context_id=context))
        texts = []
        for sentence in sentences:
            await self.push(p.tts, audio())
            text = TTSTextFrame(sentence, text_type="sentence", context_id=context)
            await self.push(p.tts, text)  # generated: its first push, by the TTS
            texts.append(text)
        await self.push(p.out, BotStartedSpeakingFrame())
        for text in texts[:play]:
            await self.push(p.out, text)  # played: pushed on by the output transport

    async def bot_stops(self) -> None:
        await self.push(self.p.out, BotStoppedSpeakingFrame())

    def turns(self) -> list[dict[str, object]]:
        turns = self.call.as_record()["turns"]
        assert isinstance(turns, list)
        return turns


async def test_a_turn_holds_the_words_heard_the_text_played_and_its_stages() -> None:
    c = Call()
    await c.user_says("what is the weather")
    await c.answer(["It is mild.", "Bring a coat."], play=2, context="a1")
    await c.bot_stops()

    (turn,) = c.turns()
    assert turn["index"] == 1 and turn["user"] == "what is the weather"
    assert turn["bot"] == "It is mild. Bring a coat." and not turn["interrupted"]
    assert turn["answered"] is True
    latency = turn["latency_ms"]
    assert isinstance(latency, dict) and set(latency) == set(STAGES)
    assert all(isinstance(latency[s], int) for s in STAGES)
    assert c.call.user_transcript == ["what is the weather"]
    assert c.call.bot_transcript == ["It is mild.", "Bring a coat."]


async def test_with_records_redact_the_record_keeps_no_number_that_was_said() -> None:
    c = Call(redacting=True)
    await c.user_says("my card is four one one one one one one one one one one one one one one one")
    await c.answer(["I will text 555 012 2345.", "Anything else?"], play=2, context="a1")
    await c.bot_stops()

    (turn,) = c.turns()
    assert turn["user"] == "my card is [card number]"
    assert turn["bot"] == "I will text [phone number]. Anything else?"
    assert "one one one" not in str(c.call.as_record()) and "2345" not in str(c.call.as_record())


async def test_an_interrupted_answer_keeps_only_what_was_played() -> None:
    c = Call()
    await c.user_says("what is the weather")
    await c.answer(["It is mild.", "Bring a coat.", "Rain later."], play=1, context="a1")
    await c.push(c.p.vad, VADUserStartedSpeakingFrame(start_secs=0.2))  # barge-in
    await c.push(c.p.vad, InterruptionFrame())
    await c.bot_stops()
    await c.push(c.p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2))
    await c.push(c.p.stt, TranscriptionFrame("call me back", "u", "now"))
    await c.answer(["Sure."], play=1, context="a2")
    await c.bot_stops()

    first, second = c.turns()
    assert first["bot"] == "It is mild." and first["interrupted"] is True
    assert second["user"] == "call me back" and second["bot"] == "Sure."
    assert second["interrupted"] is False


async def test_an_interruption_after_the_answer_played_interrupts_nothing() -> None:
    c = Call()
    await c.user_says("hello")
    await c.answer(["Hi."], play=1, context="a1")
    await c.bot_stops()
    await c.push(c.p.vad, VADUserStartedSpeakingFrame(start_secs=0.2))
    await c.push(c.p.vad, InterruptionFrame())
    assert c.turns()[0]["interrupted"] is False


async def test_text_played_after_the_caller_spoke_again_stays_with_its_answer() -> None:
    c = Call()
    await c.user_says("hello")
    await c.answer(["Hi there.", "How can I help?"], play=1, context="a1")
    late = TTSTextFrame("How can I help?", text_type="sentence", context_id="a1")
    await c.push(c.p.vad, VADUserStartedSpeakingFrame(start_secs=0.2))  # the next turn starts
    await c.push(c.p.out, late)  # ...while the last sentence finishes playing
    await c.push(c.p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2))
    await c.push(c.p.stt, TranscriptionFrame("the weather", "u", "now"))

    first, second = c.turns()
    assert first["bot"] == "Hi there. How can I help?"
    assert second["user"] == "the weather" and second["bot"] == ""


async def test_a_transcript_that_comes_after_the_caller_spoke_again_is_its_own_turns() -> None:
    c = Call()
    await c.user_says(None)  # the final is still being decoded...
    await c.push(c.p.vad, VADUserStartedSpeakingFrame(start_secs=0.2))  # ...as they go on
    await c.push(c.p.stt, TranscriptionFrame("first part", "u", "now"))
    await c.push(c.p.vad, VADUserStoppedSpeakingFrame(stop_secs=0.2))
    await c.push(c.p.stt, TranscriptionFrame("second part", "u", "now"))

    assert [t["user"] for t in c.turns()] == ["first part", "second part"]


async def test_a_greeting_is_turn_zero_and_a_turn_without_words_is_left_out() -> None:
    c = Call()
    await c.push(c.p.tts, TTSStartedFrame(context_id="hello"))
    greeting = TTSTextFrame("Hello, how can I help?", text_type="sentence", context_id="hello")
    await c.push(c.p.tts, greeting)
    await c.push(c.p.out, greeting)
    await c.user_says(None)  # a cough: the VAD heard it, the STT found no word
    await c.user_says("what time is it")

    assert [(t["index"], t["user"], t["bot"]) for t in c.turns()] == [
        (0, "", "Hello, how can I help?"),
        (2, "what time is it", ""),  # 2: the turn_latency log line's turn number
    ]


async def test_a_fatal_error_ends_the_call_as_an_error_and_errors_are_kept_bounded() -> None:
    c = Call()
    for _ in range(MAX_ERRORS + 5):
        await c.push(c.p.tts, ErrorFrame("speech server returned 500"), UP)
    assert c.call.end_reason is None  # non-fatal: the call goes on
    with pytest.warns(DeprecationWarning):  # Pipecat's older way; still honoured
        fatal = ErrorFrame("the LLM is gone", fatal=True)
    await c.push(c.p.llm, fatal, UP)
    assert c.call.end_reason == "error"
    assert len(c.call.errors) == MAX_ERRORS
    assert c.call.errors[0]["message"] == "speech server returned 500"
    assert c.call.errors[0]["fatal"] is False
