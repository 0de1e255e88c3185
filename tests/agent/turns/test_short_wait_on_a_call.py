"""Complete turns that are not English questions end on the short wait, on a real phone call:
a German question and request, a question on a noisy line, a two-word command and a French
"Oui." shorter than Pipecat's VAD start, Chinese and Japanese commands of three characters, and
questions the recognizer wrote without their question mark.

Each goes through a real Twilio call to the real server with its defaults (the adaptive end of
turn with Smart Turn v3 on the call's audio); the strategy says in the log which wait ended
the turn ("turn ends (complete)" is the short one, "(waited)" the upper bound). On the code
before the decision took the words only as a tie-breaker in any script (main at 3742bcf),
each of these waited for the upper bound: the German question ends on "an" and the noisy
line's on "from", words that vetoed a question before its question mark was read, and
"Cancel it." was too short for the English keyword rule. (With its words right, a complete question
was never held by noise there either; what noise held was every turn that waits, see
``test_adaptive_stop.py::test_a_steady_noise_floor_does_not_hold_the_turn_open``.)

The product hears these through Voxtral: the strict realtime peer stands in for it and writes
what Voxtral would ("Wann fängt der Film an?", "Where are you from?", "Cancel it."; the offline
recognizer, tiny.en, writes "Can't sleep." for espeak-ng's "cancel it").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
import websockets
from fastapi import FastAPI

from tests.agent.transports.stack import async_wait_for, phone_server
from tests.conftest import requires_espeak
from tests.fakes.line_noise import line
from tests.fakes.paused_speech import phrase_audio
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TwilioCaller, payloads, to_ulaw

pytestmark = [requires_espeak, pytest.mark.conversation, pytest.mark.timeout(120)]

SHORT_WAIT = "turn ends (complete)"
ANSWER_WITHIN_S = 8
"""Generous: on a loaded machine the recognizer's finals can take seconds; which wait ended
the turn is read from the strategy, not from the clock."""


@pytest.mark.parametrize(
    ("words", "spoken", "call_sid"),
    [
        pytest.param(
            "Wann fängt der Film an?", "wann fängt der film an", "CADEQUESTION", id="a question"
        ),
        pytest.param(
            "Rufen Sie mich morgen zurück.",
            "rufen sie mich morgen zurück",
            "CADEREQUEST",
            id="a request by its form",
        ),
    ],
)
async def test_a_german_complete_turn_is_answered_on_the_short_wait(
    redacted_log: list[str], words: str, spoken: str, call_sid: str
) -> None:
    """The question ends on "an", an English article, which vetoed it before its question mark
    was read. The request ("Rufen Sie...": the verb first, then the polite "you") has no
    English word in it: before the words knew requests in other languages
    (:mod:`agent.turns.request_forms`), it asked for nothing to them and waited for the bound
    (for the text model's middle wait in the default profile)."""
    speech = phrase_audio(spoken, 8000, "espeak:de").tobytes()
    await answered_on_the_short_wait(words, speech, call_sid, redacted_log)


async def test_a_question_on_a_noisy_line_is_answered_on_the_short_wait(
    redacted_log: list[str],
) -> None:
    """White noise 10 dB below the speech, over the whole call. The words are what Voxtral
    writes for them (tiny.en garbles such a line: "can you call me back tomorrow" came back
    as "and you call me Matt the Mario"), so this is the audio's part: the VAD stops in the
    noise, Smart Turn hears the end of a question through it, and the noise between words is
    this line's quiet."""
    speech = phrase_audio("where are you from", 8000, "espeak").tobytes()
    before, speech, after = line(speech, 8000, "white", 10, before_s=1.0, after_s=10.0)
    await answered_on_the_short_wait(
        "Where are you from?", speech, "CANOISYLINE", redacted_log, before=before, after=after
    )


async def test_a_question_with_people_talking_behind_the_caller_is_answered(
    redacted_log: list[str],
) -> None:
    """Four talkers 10 dB below the caller, from a second before the question until the
    answer: Silero calls them speech, so before the VAD's talker gate
    (``turn.vad_foreground_db``) the VAD never heard the caller stop, and the question was
    answered only once the talkers fell silent. The turn may end on either wait here (Smart
    Turn hears the talkers too); it must end while they still talk."""
    voxtral = RealtimePeer(model="voxtral-test", transcript="Can you call me back tomorrow?")
    speech = phrase_audio("can you call me back tomorrow", 8000, "piper").tobytes()
    talk_s = ANSWER_WITHIN_S
    before, speech, after = line(speech, 8000, "babble", 10, before_s=1.0, after_s=talk_s)
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2) as (url, app):
            caller, ended = await call(url, app, "CABABBLELINE", speech, before=before, after=after)
    answered = caller.first_loud(ended)
    assert answered is not None, f"no answer within {ANSWER_WITHIN_S} s of the end of speech"
    print(f"answered {answered - ended:.2f} s after the end of speech")
    assert answered - ended < talk_s - 1, "answered only when the talkers behind fell silent"
    ends = [line for line in redacted_log if "turn ends" in line]
    assert len(ends) == 1, f"expected one turn: {ends}"


async def test_cancel_it_is_answered_on_the_short_wait(redacted_log: list[str]) -> None:
    """Two words: too short for the old English keyword rule (three or more), a command to the
    words now. Smart Turn calls espeak-ng's "cancel it" complete under any noise it was tried
    with (0.83-0.98; on "Stop." it is not stable: ``test_model_wait_on_a_call.py``). Its words
    come from the Voxtral stand-in: tiny.en writes "Can't sleep."."""
    speech = phrase_audio("cancel it", 8000, "espeak").tobytes()
    await answered_on_the_short_wait("Cancel it.", speech, "CACANCELIT", redacted_log)


async def test_a_french_oui_is_answered_on_the_short_wait(redacted_log: list[str]) -> None:
    """French "Oui." from espeak-ng (0.27 s) is about as short as a word the VAD reports:
    before the VAD's 0.1 s start between turns and its per-window promotion on phone frames,
    the extended bench's call of it was never answered (the VAD never reported it at that
    call's phase against the frames; this call's phase it did hear, so the spec that fails on
    that code is ``test_shared_silero.py``'s, at every phase)."""
    oui = phrase_audio("oui", 8000, "espeak:fr").tobytes()  # the extended set's: 0.27 s
    await answered_on_the_short_wait("Oui.", oui, "CAFRENCHOUI", redacted_log)


@pytest.mark.parametrize(
    ("words", "voice", "call_sid"),
    [
        pytest.param("やめて", "espeak:ja", "CAJAYAMETE", id="japanese: stop it"),
        pytest.param("不用了", "espeak:zh", "CAZHBUYONGLE", id="chinese: no need"),
    ],
)
async def test_a_chinese_or_japanese_command_of_three_characters_is_answered_on_the_short_wait(
    redacted_log: list[str], words: str, voice: str, call_sid: str
) -> None:
    """Counted a character each, these were three words, too many for a short command, and
    waited for the upper bound (the text model's wait in the default profile); BudouX's model
    finds one word in "やめて" and two in "不用了"
    (``bench/results/turn_taking_east_asian_commands.md``). The answer is read by the tests'
    English voice, letter by letter: only its start is awaited."""
    speech = phrase_audio(words, 8000, voice).tobytes()
    await answered_on_the_short_wait(f"{words}。", speech, call_sid, redacted_log)


async def test_a_question_written_without_its_question_mark_is_answered_on_the_short_wait(
    redacted_log: list[str],
) -> None:
    """The recognizer closed "Où est la pharmacie la plus proche" with a full stop. Before the
    words read a question by its form in other languages than English
    (:mod:`agent.turns.question_forms`), it asked for nothing and waited for the upper bound
    (the text model's wait in the default profile:
    ``bench/results/turn_taking_unmarked_questions.md``); so did "你们明天开门吗。" (one call here
    keeps the suite's time: the forms of every language are ``test_question_forms.py``'s)."""
    speech = phrase_audio("où est la pharmacie la plus proche", 8000, "espeak:fr").tobytes()
    await answered_on_the_short_wait(
        "Où est la pharmacie la plus proche.", speech, "CAFROU", redacted_log
    )


async def answered_on_the_short_wait(
    words: str,
    speech: bytes,
    call_sid: str,
    log: list[str],
    *,
    before: bytes | None = None,
    after: bytes | None = None,
) -> None:
    """One call to the real server: the caller says ``speech``, the Voxtral stand-in writes
    ``words`` for it, and the turn must end on the short wait."""
    voxtral = RealtimePeer(model="voxtral-test", transcript=words)
    async with voxtral:
        with phone_server(voxtral.url, "voxtral-test", max_calls=2) as (url, app):
            caller, ended = await call(url, app, call_sid, speech, before=before, after=after)
    assert_answered_on_the_short_wait(caller, ended, log)


def assert_answered_on_the_short_wait(caller: TwilioCaller, ended: float, log: list[str]) -> None:
    answered = caller.first_loud(ended)
    assert answered is not None, f"no answer within {ANSWER_WITHIN_S} s of the end of speech"
    print(f"answered {answered - ended:.2f} s after the end of speech")
    ends = [line for line in log if "turn ends" in line]
    assert len(ends) == 1, f"expected one turn: {ends}"
    assert SHORT_WAIT in ends[0], f"the turn waited for the upper bound: {ends[0]}"


async def call(
    url: str,
    app: FastAPI,
    call_sid: str,
    speech: bytes,
    *,
    before: bytes | None = None,
    after: bytes | None = None,
    speaking: Callable[[float], None] | None = None,
) -> tuple[TwilioCaller, float]:
    """The caller says ``speech`` (8 kHz PCM16) after ``before`` (default 0.5 s of silence),
    then sends ``after`` (default silence) until the answer starts; returns the caller and
    when its speech ended (``time.monotonic``). ``speaking`` is told when the speech starts."""
    lead = payloads(to_ulaw(before)) if before else [SILENCE] * int(0.5 / FRAME_S)
    tail = payloads(to_ulaw(after)) if after else []
    half_s = int(0.5 / FRAME_S)
    async with websockets.connect(
        url.replace("http://", "ws://") + "/telephony/twilio/ws", compression=None
    ) as ws:
        caller = TwilioCaller(ws, call_sid)
        await caller.start()
        await caller.send(lead)
        began = time.monotonic()
        if speaking is not None:
            speaking(began)
        await caller.send(payloads(to_ulaw(speech)))
        ended = began + len(np.frombuffer(speech, np.int16)) / 8000
        for index in range(ANSWER_WITHIN_S * 2):  # the line until the answer starts
            chunk = tail[index * half_s : (index + 1) * half_s] or [SILENCE] * half_s
            await caller.send(chunk)
            if caller.first_loud(ended) is not None:
                break
        await caller.send([SILENCE] * int(1.0 / FRAME_S))  # time for a second turn, if any
        await caller.stop()
        await caller.close()
    registry = app.state.registry
    await async_wait_for(lambda: registry.stats.active == 0, timeout_s=15, what="the call to end")
    return caller, ended
