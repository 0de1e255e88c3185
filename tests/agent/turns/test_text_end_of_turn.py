"""The text end-of-turn signal: p(the user's message ends here) from the local LLM's server,
and what the adaptive strategy does with it (and without it, when the server stalls or fails).

The probabilities come from the real model (llama.cpp's server with the packaged SmolLM2, the
``local_llm`` fixture); the failures from real sockets that accept and then never answer, reset
the connection, or answer something that is not a completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from pipecat.audio.turn.base_turn_analyzer import EndOfTurnState

from agent.config import LLMSettings, TurnSettings
from agent.turns import text_end_of_turn
from agent.turns.text_end_of_turn import (
    STATS,
    TextEndOfTurn,
    as_spoken,
    chatml_prompt,
    prompt_context,
)
from tests.agent.turns import test_adaptive_stop
from tests.agent.turns.test_adaptive_stop import STOP_SECS, WAIT_S
from tests.conftest import requires_local_llm
from tests.fakes.serving import free_port
from tests.fakes.turn_analyzer import ScriptedTurnAnalyzer

make = test_adaptive_stop.make
"""The strategy with its frames fed by hand on the real clock (``test_adaptive_stop``)."""

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve(handler: Handler) -> AsyncIterator[str]:
    """Serve ``handler`` on loopback for a test; at its end, close the connections still open
    (Python 3.12's server waits for them to close, so a test that failed before its client
    closed would hang there)."""
    writers: list[asyncio.StreamWriter] = []

    async def kept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(kept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/v1"
        server.close()
        for writer in writers:
            writer.close()


@pytest.fixture
async def stalled() -> AsyncIterator[str]:
    """A server that accepts, reads the request and never answers (until the test is over:
    closing the server waits for its connections)."""
    over = asyncio.Event()

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        try:
            await over.wait()
        finally:
            writer.close()

    async for url in serve(handler):
        yield url
        over.set()


@pytest.fixture
async def resetting() -> AsyncIterator[str]:
    """A server that resets every connection once the request is in."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async for url in serve(handler):
        yield url


@pytest.fixture
async def not_a_completion() -> AsyncIterator[str]:
    """An HTTP server whose every answer is 200 with JSON that is no completion."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(65536)
        body = b'{"tokens": [2, 0], "choices": [{"text": "hi", "logprobs": null}]}'
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        writer.close()

    async for url in serve(handler):
        yield url


SLOW_ANSWER_S = 0.6
"""How long the ``slow`` server takes to answer: past the client's limit in the tests (0.15 s),
within the bound (``WAIT_S`` + 0.6)."""


@pytest.fixture
async def recording() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """An OpenAI completions server that answers every question "the sentence ends" and keeps
    each request's JSON body."""
    async for served in answering(delay_s=0.0):
        yield served


@pytest.fixture
async def slow() -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """``recording``, each completion answered :data:`SLOW_ANSWER_S` after its request."""
    async for served in answering(delay_s=SLOW_ANSWER_S):
        yield served


async def answering(delay_s: float) -> AsyncIterator[tuple[str, list[dict[str, Any]]]]:
    """Serve completions that say "the sentence ends", ``delay_s`` after each request."""
    bodies: list[dict[str, Any]] = []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with contextlib.suppress(asyncio.IncompleteReadError):
                await answer_each(reader, writer)
        finally:
            writer.close()

    async def answer_each(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = next(
                int(line.split(b":")[1])
                for line in head.lower().split(b"\r\n")
                if line.startswith(b"content-length:")
            )
            bodies.append(json.loads(await reader.readexactly(length)))
            if "input" in bodies[-1]:
                answer: dict[str, Any] = {"tokens": [2, 0]}
            else:
                await asyncio.sleep(delay_s)
                answer = {"choices": [{"logprobs": {"top_logprobs": [{"": 0.0}]}}]}
            body = json.dumps(answer).encode()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()

    async for url in serve(handler):
        yield url, bodies


async def test_each_call_names_itself_so_the_server_keeps_calls_apart(
    recording: tuple[str, list[dict[str, Any]]],
) -> None:
    """Each call's questions carry one ``user`` of their own (OpenAI's field for the end user),
    which ``agent.local.llm_app`` keeps a sequence for: two calls' questions do not evict each
    other's prompt."""
    url, bodies = recording
    calls = [TextEndOfTurn(url, "m", timeout_s=2.0) for _ in range(2)]
    try:
        for words in ("Can you tell me", "Can you tell me the opening hours"):
            for call in calls:
                assert await call.probability(words) == 1.0
    finally:
        for call in calls:
            await call.close()
    users = [body["user"] for body in bodies if "prompt" in body]
    assert len(users) == 4 and users[0] == users[2] != users[1] == users[3]


async def test_the_conversation_is_read_ahead_once_and_the_question_goes_on_from_it(
    recording: tuple[str, list[dict[str, Any]]],
) -> None:
    """``prime`` sends the conversation open for the user's words, under the call's ``user``,
    once per conversation; the question's prompt then only adds the words."""
    url, bodies = recording
    conversation = [("system", "Be brief."), ("assistant", "Hello!")]
    model = TextEndOfTurn(url, "m", timeout_s=2.0)
    primed = STATS.primed
    try:
        await model.prime(conversation)
        await model.prime(conversation)  # the same conversation: not sent again
        await model.probability("What time is it", conversation)
    finally:
        await model.close()
    ahead, question = (body for body in bodies if "prompt" in body)
    assert (
        ahead["prompt"]
        == chatml_prompt("", conversation)
        == (
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n"
            "<|im_start|>user\n"
        )
    )
    assert question["prompt"] == ahead["prompt"] + "what time is it"
    assert ahead["user"] == question["user"]
    assert STATS.primed == primed + 1


async def test_a_failed_read_ahead_is_silent_and_leaves_the_question_alone(
    resetting: str,
) -> None:
    model = TextEndOfTurn(resetting, "m", timeout_s=2.0)
    failed, primed = STATS.failed, STATS.primed
    try:
        await model.prime([("system", "Be brief.")])
    finally:
        await model.close()
    assert (STATS.failed, STATS.primed) == (failed, primed)  # neither an answer nor a failure


@requires_local_llm
async def test_the_model_hears_a_sentence_go_on(local_llm: LLMSettings) -> None:
    assert local_llm.base_url is not None
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=5.0)
    try:
        going_on = await model.probability("Can you tell me")
        finished = await model.probability("What time is it?")
    finally:
        await model.close()
    assert going_on is not None and finished is not None
    assert going_on < 0.01 < finished <= 1  # "What time is it?": 0.24 with no prompt at all


def greeted() -> list[tuple[str, str]]:
    """The conversation before the caller's first words: the voice assistant's system prompt
    and its greeting."""
    return [
        ("system", LLMSettings().system_prompt),
        ("assistant", "Hello! How can I help you today?"),
    ]


@requires_local_llm
async def test_the_model_hears_a_fragment_through_the_recognizers_full_stop(
    local_llm: LLMSettings,
) -> None:
    """A recognizer closes what it heard before a pause with a full stop. The model reads the
    words without it, so "Book a table." still goes on to it (0.025 with the voice assistant's
    prompt) while the finished request ends (0.41). With the full stop kept, "Book a table."
    read 0.08 and the finished statement "I would like to book a table for two people." 0.007."""
    assert local_llm.base_url is not None
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=10.0)
    conversation = greeted()
    try:
        fragment = await model.probability("Book a table.", conversation)
        finished = await model.probability("Book a table for two people.", conversation)
    finally:
        await model.close()
    assert fragment is not None and finished is not None
    assert fragment < 0.1 < finished <= 1


@requires_local_llm
async def test_the_default_veto_holds_words_that_must_go_on_and_passes_complete_requests(
    local_llm: LLMSettings,
) -> None:
    """The veto's default threshold (``turn.text_unfinished_p``) against the model's reading,
    with the voice assistant's prompt: a request that cannot end here reads exactly 0 (the
    reading sums the end marks among the model's 20 likeliest next tokens, and none is there),
    complete requests 0.05-0.5. At 0.1, the first default, "Please cancel my taxi." (0.052) and
    "Send me the receipt." (0.072) waited for the bound, and after three exchanges 6 of 19
    complete requests read under 0.1 (``bench/results/text_end_probe.md``)."""
    assert local_llm.base_url is not None
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=10.0)
    conversation = greeted()
    going_on = ("Can you tell me.", "Could you check.", "Please send me.")
    complete = ("Please cancel my taxi.", "Send me the receipt.", "Call my mother.")
    try:
        heard = {text: await model.probability(text, conversation) for text in going_on + complete}
    finally:
        await model.close()
    threshold = TurnSettings().text_unfinished_p
    held = {text for text, p in heard.items() if p is not None and p < threshold}
    assert held == set(going_on), heard
    assert all(heard[text] == 0.0 for text in going_on), heard
    assert min(p or 0.0 for text, p in heard.items() if text in complete) > 2 * threshold, heard


async def test_a_server_that_never_answers_gives_no_opinion_in_time(stalled: str) -> None:
    model = TextEndOfTurn(stalled, "m", timeout_s=0.2)
    timed_out = STATS.timed_out
    try:
        p = await asyncio.wait_for(model.probability("What time is it?"), 2.0)
    finally:
        await model.close()
    assert p is None
    assert STATS.timed_out == timed_out + 1


async def test_after_two_late_answers_in_a_row_the_next_questions_are_not_asked(
    stalled: str,
) -> None:
    """A late answer costs the turn its wait and the server a request, for nothing; in a call
    whose conversation has grown, the next one is late too (``bench/text_model_calls.py``)."""
    model = TextEndOfTurn(stalled, "m", timeout_s=0.1, late_in_a_row=2, rest_for=2)
    timed_out, rested = STATS.timed_out, STATS.rested
    try:
        answers = [await model.probability("Call my mother.") for _ in range(5)]
    finally:
        await model.close()
    assert answers == [None] * 5
    assert STATS.timed_out - timed_out == 3  # asked, asked, rested, rested, asked again
    assert STATS.rested - rested == 2


async def test_a_reset_connection_gives_no_opinion(resetting: str) -> None:
    model = TextEndOfTurn(resetting, "m", timeout_s=2.0)
    failed = STATS.failed
    try:
        assert await model.probability("What time is it?") is None
    finally:
        await model.close()
    assert STATS.failed == failed + 1


async def test_an_answer_that_is_no_completion_gives_no_opinion(not_a_completion: str) -> None:
    model = TextEndOfTurn(not_a_completion, "m", timeout_s=2.0)
    try:
        assert await model.probability("What time is it?") is None
    finally:
        await model.close()


async def test_no_server_at_all_gives_no_opinion() -> None:
    model = TextEndOfTurn(f"http://127.0.0.1:{free_port()}/v1", "m", timeout_s=2.0)
    try:
        assert await model.probability("What time is it?") is None
    finally:
        await model.close()


def test_the_model_reads_the_words_as_spoken_in_any_script() -> None:
    assert as_spoken("Book a table.") == "book a table"
    assert as_spoken("I\u2019d like \u2014 to\u2026 go?") == "i'd like to go"
    assert as_spoken("¿Qué hora es?") == "qué hora es"
    assert as_spoken("Wann fängt der Film an\uff1f") == "wann fängt der film an"
    assert as_spoken("你好。") == "你好"
    assert as_spoken(" ... ") == ""


def test_the_prompt_is_the_answers_chat_template_open_after_the_users_words() -> None:
    """The conversation as the chat template writes it for the answer (SmolLM2's ChatML,
    content unchanged), so the server's kept prompt serves the question and the answer."""
    conversation = [("system", "Be brief."), ("assistant", " Hello! ")]
    assert chatml_prompt("  What time is it? ", conversation) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>assistant\n Hello! <|im_end|>\n"
        "<|im_start|>user\nWhat time is it?"
    )
    assert chatml_prompt("x" * 5000).endswith("x" * text_end_of_turn.MAX_USER_CHARS)
    assert len(chatml_prompt("x" * 5000)) < 700


@requires_local_llm
def test_the_prompt_is_what_the_server_renders_for_the_answer_up_to_the_users_words() -> None:
    """The packaged model's own chat template, as llama-cpp-python's server renders it for a
    chat completion: the question's prompt is its prefix, so the server reads each part once."""
    from llama_cpp import Llama
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    from agent.local.llm_server import packaged_model

    model = Llama(model_path=str(packaged_model()), vocab_only=True, verbose=False)
    render = Jinja2ChatFormatter(
        template=model.metadata["tokenizer.chat_template"],
        eos_token=model._model.token_get_text(model.token_eos()),
        bos_token=model._model.token_get_text(model.token_bos()),
    )
    conversation = [("system", "Be brief."), ("assistant", "Hello! How can I help?")]
    messages: list[Any] = [{"role": role, "content": text} for role, text in conversation]
    answer = render(messages=[*messages, {"role": "user", "content": "What time is it?"}])
    question = chatml_prompt("what time is it", conversation)
    shared = question.removesuffix("what time is it")
    assert shared.endswith("<|im_start|>user\n") and answer.prompt.startswith(shared)


def test_the_conversation_is_read_as_the_answers_request_sends_it() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Shall I?"}]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "{}"},
        {"role": "user", "content": "Yes"},
    ]
    said = [("assistant", "Hello!"), ("user", "Hi"), ("assistant", "Shall I?"), ("user", "Yes")]
    assert prompt_context(messages) == [("system", "Be brief."), *said]
    assert prompt_context(messages, "Be kind.") == [("system", "Be brief."), *said]
    assert prompt_context(messages[1:], "Be kind.") == [("system", "Be kind."), *said]
    assert prompt_context(messages[1:]) == said


# ----------------------------------------------------------------------------- the strategy


@requires_local_llm
async def test_a_statement_smart_turn_and_the_model_call_complete_ends_at_once(
    make: Any, local_llm: LLMSettings
) -> None:
    """Without the model a statement waits for the bound (the words ask for nothing). The
    threshold here is 0: this is the path (the model's answer decides once it is in), not the
    model's judgement, which does not tell statements from clause pauses (the bench). The bound
    is long, so that the model's answer comes before it on a loaded machine too (316 ms in CI)."""
    assert local_llm.base_url is not None
    bound_s = 4.0
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=bound_s)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
        unfinished_wait_s=bound_s,
        text_model=model,
        text_end_p=0.0,
    )
    await turn.speak()
    await turn.pause("Quisiera reservar una mesa para dos personas.")
    await turn.until_ended(within_s=bound_s + 0.5)
    assert turn.after_speech() < bound_s - 0.5, "the statement waited for the bound"


MODELS_WAIT_S = 0.5
"""``text_end_wait_s`` in the tests below: between the short wait (0) and the bound (``WAIT_S``
+ 0.6), far enough from both that a loaded machine does not blur them."""

MODELS_BOUND_S = WAIT_S + 0.6
"""``unfinished_wait_s`` in the tests below."""


async def on_the_models_wait(
    make: Any, url: str, verdict: EndOfTurnState, timeout_s: float = 1.0, **options: Any
) -> Any:
    """The strategy with Smart Turn's ``verdict`` and the model at ``url``, which ends a turn
    it reads finished (p(end) 0.5 or more) after :data:`MODELS_WAIT_S`; the bound
    :data:`MODELS_BOUND_S`."""
    return await make(
        ScriptedTurnAnalyzer(verdict),
        unfinished_wait_s=MODELS_BOUND_S,
        text_model=TextEndOfTurn(url, "m", timeout_s=timeout_s),
        text_end_p=0.5,
        text_end_wait_s=MODELS_WAIT_S,
        **options,
    )


@pytest.mark.parametrize(
    ("verdict", "words", "ending"),
    [
        pytest.param(
            EndOfTurnState.COMPLETE,
            "I would like to book a table for two people.",
            "finished",
            id="a statement both models call finished: the model's wait",
        ),
        pytest.param(
            EndOfTurnState.COMPLETE,
            "Mi richiami domani mattina.",
            "finished",
            id="a request the words rule does not know: the model's wait",
        ),
        pytest.param(
            EndOfTurnState.COMPLETE,
            "Rufen Sie mich morgen zurück.",
            "complete",
            id="a request by its form, in German: at once",
        ),
        pytest.param(
            EndOfTurnState.COMPLETE,
            "Is the store open today?",
            "complete",
            id="a question: at once",
        ),
        pytest.param(
            EndOfTurnState.INCOMPLETE,
            "I would like to book a table for two people.",
            "waited",
            id="Smart Turn hears it go on: the bound",
        ),
        pytest.param(
            EndOfTurnState.COMPLETE,
            "I would like to book a table for.",
            "waited",
            id="it stops on a preposition: the bound",
        ),
        pytest.param(
            EndOfTurnState.COMPLETE,
            "Quand je suis arrivé.",
            "waited",
            id="a subordinate clause alone: the bound",
        ),
    ],
)
async def test_a_turn_the_models_call_finished_ends_after_the_models_wait(
    make: Any,
    recording: tuple[str, list[dict[str, Any]]],
    verdict: EndOfTurnState,
    words: str,
    ending: str,
) -> None:
    """A statement reads as finished to the model as much as a list item before a pause does
    ("I need apples." 0.26), so a turn only the models call finished ends after a middle wait,
    not at once; words that ask still end at once. The model here reads every sentence as
    ending (p 1.0)."""
    url, _ = recording
    turn = await on_the_models_wait(make, url, verdict)
    await turn.speak()
    await turn.pause(words)
    await turn.until_ended(within_s=MODELS_BOUND_S + 0.5)
    waited = {"complete": 0.0, "finished": MODELS_WAIT_S, "waited": MODELS_BOUND_S}[ending]
    assert waited - 0.02 < turn.after_speech() < waited + 0.25


WORDS_OVER_AUDIO = {"words_over_audio": True}
MODEL_OVER_AUDIO = {"model_over_audio": True}


@pytest.mark.parametrize(
    ("words", "over_audio", "ending"),
    [
        pytest.param("Wann fängt der Film an?", WORDS_OVER_AUDIO, "finished", id="a question mark"),
        pytest.param("Stop.", WORDS_OVER_AUDIO, "finished", id="one word"),
        pytest.param("Can you check my last order.", WORDS_OVER_AUDIO, "finished", id="a request"),
        pytest.param(
            "I would like to book a table for two people.",
            WORDS_OVER_AUDIO,
            "waited",
            id="a statement: words that ask for nothing",
        ),
        pytest.param("Stop.", {}, "waited", id="one word, Smart Turn decides"),
        pytest.param(
            "I would like to book a table for two people.",
            MODEL_OVER_AUDIO,
            "finished",
            id="a statement the model reads finished",
        ),
        pytest.param(
            "Mi richiami domani mattina.",
            MODEL_OVER_AUDIO,
            "finished",
            id="a request the words rule does not know",
        ),
        pytest.param(
            "Rappelez moi demain matin.", WORDS_OVER_AUDIO, "finished", id="a request in French"
        ),
        pytest.param(
            "I would like to book a table for.",
            MODEL_OVER_AUDIO,
            "waited",
            id="the model's: it stops on a preposition",
        ),
    ],
)
async def test_what_ends_a_turn_smart_turn_hears_unfinished_on_the_models_wait(
    make: Any,
    recording: tuple[str, list[dict[str, Any]]],
    words: str,
    over_audio: dict[str, bool],
    ending: str,
) -> None:
    """Smart Turn misses some short turns on noisy lines and in other voices ("stop" 0.14 on
    white noise 20 dB, French "quelle heure est il" 0.04: the bench's log), and some finished
    statements and requests by WebRTC (French "Rappelez moi demain matin", 2026-12-06). With
    ``words_over_audio``, words that ask end such a turn on the model's wait unless the model
    holds them; with ``model_over_audio``, words that do not ask do when the model reads them
    finished (it reads every sentence as ending here, p 1.0), unless they stop on an unfinished
    word; otherwise, the bound."""
    url, _ = recording
    turn = await on_the_models_wait(make, url, EndOfTurnState.INCOMPLETE, **over_audio)
    await turn.speak()
    await turn.pause(words)
    await turn.until_ended(within_s=MODELS_BOUND_S + 0.5)
    waited = {"finished": MODELS_WAIT_S, "waited": MODELS_BOUND_S}[ending]
    assert waited - 0.02 < turn.after_speech() < waited + 0.25


@pytest.mark.parametrize(
    ("clause", "main_clause"),
    [
        pytest.param("When I got there.", "The door was locked.", id="closed by the recognizer"),
        pytest.param("When I got there", "the door was locked.", id="left open by the recognizer"),
    ],
)
async def test_a_clause_then_its_main_clause_after_a_pause_ends_on_the_models_wait(
    make: Any, recording: tuple[str, list[dict[str, Any]]], clause: str, main_clause: str
) -> None:
    """The clause alone waits for the bound at its pause; the main clause after it ends the
    turn on the model's wait, also where the recognizer wrote both as one sentence ("When I
    got there the door was locked."): the clause is read on the words since the last pause,
    not the turn's."""
    url, _ = recording
    turn = await on_the_models_wait(make, url, EndOfTurnState.COMPLETE)
    await turn.speak()
    await turn.pause(clause)
    await asyncio.sleep(MODELS_WAIT_S + 0.15)
    assert not turn.ended, "the turn ended on the model's wait after a clause alone"
    await turn.speak()
    await turn.pause(main_clause)
    await turn.until_ended(within_s=MODELS_BOUND_S + 0.5)
    assert MODELS_WAIT_S - 0.02 < turn.after_speech() < MODELS_WAIT_S + 0.25


async def test_speech_within_the_models_wait_keeps_the_turn_open(
    make: Any, recording: tuple[str, list[dict[str, Any]]]
) -> None:
    """ "I need apples." ... "and some coffee.": the list goes on within the model's wait, so
    the turn ends after its last item, not after its first."""
    url, _ = recording
    turn = await on_the_models_wait(make, url, EndOfTurnState.COMPLETE)
    await turn.speak()
    await turn.pause("I need apples.")
    await asyncio.sleep(MODELS_WAIT_S - STOP_SECS - 0.15)
    await turn.speak()
    assert not turn.ended, "the turn ended within the model's wait"
    await turn.pause("And some coffee.")
    await turn.until_ended(within_s=WAIT_S + 1.0)
    assert len(turn.ended) == 1
    assert MODELS_WAIT_S - 0.02 < turn.after_speech() < MODELS_WAIT_S + 0.25


@requires_local_llm
async def test_words_that_ask_still_wait_when_the_model_hears_them_go_on(
    make: Any, local_llm: LLMSettings
) -> None:
    """ "Book a table" reads as a request; the model expects "for ..." (p(end) 0.025 with a
    voice assistant's system prompt, 0.036 with none, as here). The bound is long enough for
    the model to answer first on a loaded machine, so the wait is its veto, not a slow answer."""
    assert local_llm.base_url is not None
    bound_s = 2.0
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=bound_s)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
        unfinished_wait_s=bound_s,
        text_model=model,
        text_unfinished_p=0.5,
    )
    await turn.speak()
    await turn.pause("Book a table.")
    await turn.until_ended(within_s=bound_s + 0.5)
    assert turn.after_speech() > bound_s - 0.02, "ended although the model heard it go on"


async def test_the_model_reads_the_conversation_while_the_user_speaks(
    make: Any, recording: tuple[str, list[dict[str, Any]]]
) -> None:
    """At the user's first word the model is given the conversation so far, once for the turn
    (a second segment does not send it again), so its question at the end reads only words."""
    url, bodies = recording
    conversation = [("system", "Be brief."), ("assistant", "How can I help?")]
    model = TextEndOfTurn(url, "m", timeout_s=1.0)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
        text_model=model,
        text_unfinished_p=0.5,
        context=lambda: conversation,
    )
    await turn.speak()
    await turn.pause("Book a table")
    await turn.speak()
    await turn.pause("for two people.")
    await turn.until_ended(within_s=WAIT_S + 0.5)
    prompts = [body["prompt"] for body in bodies if "prompt" in body]
    assert prompts[0] == chatml_prompt("", conversation)
    assert prompts.count(chatml_prompt("", conversation)) == 1
    await model.close()


async def test_two_words_are_read_by_the_model_unless_the_veto_starts_at_three(
    make: Any, stalled: str
) -> None:
    """ "Can you." is a command to the words rule alone; by default the veto reads two words, so
    the model (here one that never answers) is waited for; ``text_veto_min_words=3`` leaves
    it to the words."""
    for min_words, waits in ((2, True), (3, False)):
        model = TextEndOfTurn(stalled, "m", timeout_s=0.3)
        turn = await make(
            ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
            text_model=model,
            text_unfinished_p=0.5,
            text_veto_min_words=min_words,
        )
        await turn.speak()
        await turn.pause("Can you.")
        await turn.until_ended(within_s=WAIT_S)
        waited = turn.after_speech() > STOP_SECS + 0.25
        assert waited == waits, f"min words {min_words}: ended {turn.after_speech():.2f} s after"
        await model.close()


async def test_a_model_that_never_answers_holds_a_question_only_its_timeout(
    make: Any, stalled: str
) -> None:
    model = TextEndOfTurn(stalled, "m", timeout_s=0.15)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE), text_model=model, text_unfinished_p=0.5
    )
    await turn.speak()
    await turn.pause("Is the store open today.")  # a question by its words: the model is asked
    await asyncio.sleep(WAIT_S)
    assert turn.after_speech() < STOP_SECS + 0.15 + 0.15, "waited past the model's timeout"


@pytest.mark.parametrize(
    ("words", "after_speech_s"),
    [
        pytest.param(
            "I would like to book a table for two people.",
            STOP_SECS + SLOW_ANSWER_S,
            id="words that do not ask: when the answer comes, not at the bound",
        ),
        pytest.param(
            "Is the store open today.",
            STOP_SECS + 0.15,
            id="words that ask: at once after the client's limit, as without the model",
        ),
    ],
)
async def test_a_slow_models_answer_is_waited_for_where_it_decides_between_waits(
    make: Any, slow: tuple[str, list[dict[str, Any]]], words: str, after_speech_s: float
) -> None:
    """Chinese, Japanese and Korean words are many tokens each to SmolLM2, and their answers
    came past the client's 0.35 s limit in 3-9 of 32 questions of the East Asian set's runs:
    a statement then waited for the bound. For words that may not end on the short wait the
    answer decides between the model's wait and the bound, so it is waited for until the
    bound; words that ask need it before the short wait, and do not wait past the limit."""
    url, _ = slow
    turn = await on_the_models_wait(
        make, url, EndOfTurnState.COMPLETE, timeout_s=0.15, text_unfinished_p=0.5
    )
    await turn.speak()
    await turn.pause(words)
    await turn.until_ended(within_s=MODELS_BOUND_S + 0.5)
    assert after_speech_s - 0.02 < turn.after_speech() < after_speech_s + 0.25


async def test_without_the_models_answer_words_do_not_outweigh_smart_turn(
    make: Any, stalled: str, resetting: str, not_a_completion: str
) -> None:
    """``words_over_audio`` ends a request Smart Turn hears unfinished on the model's wait
    only when the model reads it finished: a model that stalls, resets the connection or
    answers something else gives no opinion, and the turn waits for the bound."""
    bound_s = WAIT_S + 0.6
    for url in (stalled, resetting, not_a_completion):
        turn = await make(
            ScriptedTurnAnalyzer(EndOfTurnState.INCOMPLETE),
            unfinished_wait_s=bound_s,
            text_model=TextEndOfTurn(url, "m", timeout_s=0.15),
            text_end_p=0.1,
            text_end_wait_s=MODELS_WAIT_S,
            words_over_audio=True,
        )
        await turn.speak()
        await turn.pause("Can you check my last order.")
        await turn.until_ended(within_s=bound_s + 0.5)
        assert bound_s - 0.02 < turn.after_speech() < bound_s + 0.25, url


async def test_a_question_mark_the_model_cannot_read_for_a_fault_ends_as_without_it(
    make: Any, stalled: str, resetting: str, not_a_completion: str
) -> None:
    """With ``text_question_unfinished_p`` a question the recognizer closed waits for the
    model; a model that stalls, resets the connection or answers something else gives no
    opinion, and the question mark decides, at once after the client's timeout at the most,
    never on the model's wait or the bound."""
    for url in (stalled, resetting, not_a_completion):
        turn = await make(
            ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
            text_model=TextEndOfTurn(url, "m", timeout_s=0.15),
            text_end_wait_s=MODELS_WAIT_S,
            text_question_unfinished_p=0.5,
        )
        await turn.speak()
        await turn.pause("Can you tell me?")
        await turn.until_ended(within_s=WAIT_S + 0.5)
        assert turn.after_speech() < STOP_SECS + 0.15 + 0.15, url


async def test_a_late_answer_does_not_decide_the_next_turn(make: Any, stalled: str) -> None:
    """The first turn ends at the bound while the model is still asked; the next turn's
    words are judged on their own."""
    model = TextEndOfTurn(stalled, "m", timeout_s=1.0)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE), text_model=model, text_end_p=0.0
    )
    await turn.speak()
    await turn.pause("I would like to book a table.")
    await asyncio.sleep(WAIT_S + 0.1)
    assert len(turn.ended) == 1
    await turn.speak()
    await turn.pause("I would like to book a table.")
    await asyncio.sleep(WAIT_S + 0.1)
    assert len(turn.ended) == 2
    assert turn.after_speech() > WAIT_S - 0.02


@pytest.mark.parametrize(
    "words",
    [
        # too little for the model: "Yes." reads 0.001 with no question before it
        pytest.param("Yes.", id="a one-word answer"),
        pytest.param("Stop.", id="a one-word command"),
        # the recognizer heard the question; the model reads bare words and hardly any
        # language but English (its veto held "Wann fängt der Film an?" for the bound)
        pytest.param("Wann fängt der Film an?", id="a question closed with a question mark"),
    ],
)
async def test_what_the_model_cannot_read_is_left_to_the_words(
    make: Any, stalled: str, words: str
) -> None:
    """The veto does not apply, so the model (here one that never answers) is not waited for."""
    model = TextEndOfTurn(stalled, "m", timeout_s=1.0)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE), text_model=model, text_unfinished_p=0.5
    )
    await turn.speak()
    await turn.pause(words)
    await asyncio.sleep(0.05)
    assert turn.after_speech() < STOP_SECS + 0.1, "waited for the model"


@requires_local_llm
@pytest.mark.parametrize(
    ("words", "threshold", "ending"),
    [
        pytest.param("Can you tell me?", 0.001, "waited", id="a fragment the model reads go on"),
        pytest.param("Is the store open today?", 0.001, "complete", id="a question it reads end"),
        pytest.param("Can you tell me?", 0.0, "complete", id="the question mark decides"),
    ],
)
async def test_a_question_the_model_hears_go_on_waits_for_the_bound_under_its_threshold(
    make: Any, local_llm: LLMSettings, words: str, threshold: float, ending: str
) -> None:
    """tiny.en closes "can you tell me" with a question mark at a pause, and Smart Turn hears a
    finished question in the voice; the model expects the words to go on ("what", "about":
    p(end) 0.000 after the assistant's system prompt and greeting). Under
    ``text_question_unfinished_p`` the question waits for the bound, as a request the model
    holds does, not the model's wait: "can you... check my last order" pauses 0.84 s on the
    bench's set, past it. The bound is long, so the model answers before the model's wait (and
    so could end the turn there), on a loaded machine too (316 ms in CI)."""
    assert local_llm.base_url is not None
    bound_s, models_wait_s = 3.0, 1.5
    model = TextEndOfTurn(local_llm.base_url, local_llm.model, timeout_s=bound_s)
    turn = await make(
        ScriptedTurnAnalyzer(EndOfTurnState.COMPLETE),
        unfinished_wait_s=bound_s,
        text_model=model,
        text_end_wait_s=models_wait_s,
        text_question_unfinished_p=threshold,
        context=greeted,
    )
    await turn.speak()
    await turn.pause(words)
    await turn.until_ended(within_s=bound_s + 0.5)
    if ending == "waited":
        assert bound_s - 0.02 < turn.after_speech() < bound_s + 0.25
    else:
        assert turn.after_speech() < models_wait_s - 0.5, "a question the model reads ending waited"
