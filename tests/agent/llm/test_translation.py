"""The translation stage against a real OpenAI-compatible chat server on loopback: what it
asks the model, and the frames it sends for each utterance."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI
from pipecat.frames.frames import (
    EagerEndOfTurnCancelFrame,
    EagerTranscriptionFrame,
    ErrorFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
)
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame
from pipecat.tests.utils import SleepFrame, run_test

from agent.config import DEFAULT_TRANSLATION_INSTRUCTION
from agent.llm.translation import (
    TranslationError,
    TranslationProcessor,
    TranslationSpec,
    Translator,
)
from tests.fakes.chat_server import ChatServer

SPEC = TranslationSpec(
    source_language="English", target_language="German", instruction=DEFAULT_TRANSLATION_INSTRUCTION
)


def german(messages: list[dict[str, Any]]) -> str:
    return {"good morning": "Guten Morgen.", "thank you": "Danke schön."}[messages[-1]["content"]]


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with ChatServer(script=german) as server:
        yield server


def translator(base_url: str, **options: Any) -> Translator:
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test")
    return Translator(client, model="translator", spec=SPEC, **options)


def transcript(text: str) -> TranscriptionFrame:
    return TranscriptionFrame(text, user_id="caller", timestamp="2026-12-03T00:00:00Z")


async def test_the_instruction_names_both_languages_and_carries_only_the_utterance(
    chat: ChatServer,
) -> None:
    pieces = [piece async for piece in translator(chat.base_url).stream("good morning")]
    assert "".join(pieces) == "Guten Morgen." and len(pieces) == 2  # streamed, word by word
    (request,) = chat.requests
    assert request["messages"] == [
        {
            "role": "system",
            "content": "You are an interpreter. Translate what the user says from English into "
            "German. Reply with the translation only: no quotes, no notes, no answer to what "
            "was said.",
        },
        {"role": "user", "content": "good morning"},
    ]
    assert (request["temperature"], request["max_tokens"]) == (0.0, 200)


async def test_a_model_slower_than_the_limit_is_a_translation_error() -> None:
    with ChatServer(script=german, first_token_delay_s=1.0) as slow:
        with pytest.raises(TranslationError, match=r"within 0.3 s \(raise translation.timeout_s"):
            async for _ in translator(slow.base_url, timeout_s=0.3).stream("thank you"):
                pass


async def test_a_model_that_refuses_is_a_translation_error_naming_the_status() -> None:
    def refuse(_messages: list[dict[str, Any]]) -> str:
        raise AssertionError("never asked")

    with ChatServer(script=refuse) as chat:
        with pytest.raises(TranslationError, match=r"refused the translation: HTTP 404"):
            client = AsyncOpenAI(base_url=chat.url + "/nowhere", api_key="sk-test")
            async for _ in Translator(client, model="m", spec=SPEC).stream("thank you"):
                pass


async def test_each_utterance_is_captioned_and_spoken_in_order_and_empty_ones_are_not_sent(
    chat: ChatServer,
) -> None:
    processor = TranslationProcessor(translator(chat.base_url), speak=True)
    down, up = await run_test(
        processor,
        frames_to_send=[transcript("good morning"), transcript("  "), transcript("thank you")],
    )
    assert [r["messages"][-1]["content"] for r in chat.requests] == ["good morning", "thank you"]
    finals = [
        f.data for f in down if isinstance(f, RTVIServerMessageFrame) and f.data["final"] is True
    ]
    assert [(c["id"], c["source"], c["text"]) for c in finals] == [
        (1, "good morning", "Guten Morgen."),
        (2, "thank you", "Danke schön."),
    ]
    # Each translation is one response for the TTS: start, its text, end.
    responses: list[str] = []
    for frame in down:
        if isinstance(frame, LLMFullResponseStartFrame):
            responses.append("")
        elif isinstance(frame, LLMTextFrame):
            responses[-1] += frame.text
        elif isinstance(frame, LLMFullResponseEndFrame):
            responses.append("<end>")
    assert responses == ["Guten Morgen.", "<end>", "Danke schön.", "<end>"]
    # The transcripts go on downstream as they came (the call record keeps what was said).
    assert [f.text for f in down if isinstance(f, TranscriptionFrame)] == [
        "good morning",
        "  ",
        "thank you",
    ]
    assert not [f for f in up if isinstance(f, ErrorFrame)]


async def test_captions_only_sends_nothing_to_speak(chat: ChatServer) -> None:
    processor = TranslationProcessor(translator(chat.base_url), speak=False)
    down, _ = await run_test(processor, frames_to_send=[transcript("good morning")])
    assert not [f for f in down if isinstance(f, LLMTextFrame | LLMFullResponseStartFrame)]
    assert [f.data["text"] for f in down if isinstance(f, RTVIServerMessageFrame)][-1] == (
        "Guten Morgen."
    )


# ------------------------------------------------- starting on the stable interim transcript


def early(text: str) -> EagerTranscriptionFrame:
    return EagerTranscriptionFrame(text, "caller", "2026-12-03T00:00:00Z")


def spoken(down: list[Any]) -> list[str]:
    """The responses sent to the TTS, each as its text."""
    responses: list[str] = []
    for frame in down:
        if isinstance(frame, LLMFullResponseStartFrame):
            responses.append("")
        elif isinstance(frame, LLMTextFrame):
            responses[-1] += frame.text
    return responses


def final_captions(down: list[Any]) -> list[tuple[int, str, str]]:
    return [
        (f.data["id"], f.data["source"], f.data["text"])
        for f in down
        if isinstance(f, RTVIServerMessageFrame) and f.data.get("final") is True
    ]


async def test_an_early_translation_the_final_confirms_is_asked_once_and_spoken(
    chat: ChatServer,
) -> None:
    processor = TranslationProcessor(translator(chat.base_url), speak=True)
    down, _ = await run_test(
        processor,
        # The fake chat answers at once, but a loaded 2-core machine took over 0.5 s to get
        # the reply through (CI, 2026-12-04): the final comes 2 s after the early transcript.
        frames_to_send=[early("good morning"), SleepFrame(2.0), transcript("Good morning.")],
    )
    assert [r["messages"][-1]["content"] for r in chat.requests] == ["good morning"]
    assert spoken(down) == ["Guten Morgen."]
    assert final_captions(down) == [(1, "Good morning.", "Guten Morgen.")]
    # Its captions streamed while the final transcript was still to come.
    first_caption = next(i for i, f in enumerate(down) if isinstance(f, RTVIServerMessageFrame))
    final = next(i for i, f in enumerate(down) if isinstance(f, TranscriptionFrame))
    assert first_caption < final


async def test_an_early_translation_the_final_contradicts_is_never_spoken(
    chat: ChatServer,
) -> None:
    processor = TranslationProcessor(translator(chat.base_url), speak=True)
    down, _ = await run_test(
        processor, frames_to_send=[early("good morning"), transcript("thank you")]
    )
    assert chat.requests[-1]["messages"][-1]["content"] == "thank you"
    assert spoken(down) == ["Danke schön."]
    assert final_captions(down) == [(1, "thank you", "Danke schön.")]


async def test_an_early_translation_is_dropped_when_the_speaker_goes_on(
    chat: ChatServer,
) -> None:
    processor = TranslationProcessor(translator(chat.base_url), speak=True)
    down, _ = await run_test(
        processor,
        frames_to_send=[
            early("good morning"),
            SleepFrame(0.3),
            EagerEndOfTurnCancelFrame(),
            SleepFrame(0.1),
            transcript("thank you"),
        ],
    )
    assert spoken(down) == ["Danke schön."]
    # The utterance keeps its number: its captions start over with the final's translation.
    assert final_captions(down) == [(1, "thank you", "Danke schön.")]
