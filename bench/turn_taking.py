"""Turn-taking on real calls: does the bot talk over people who pause?

Plays the paused-speech set (``tests/fakes/paused_speech.py``: clause pauses, hesitations,
lists, digits read one by one, a long sentence with many commas, and short complete
questions; pauses of 300-900 ms) through a Twilio phone call (8 kHz μ-law) and through a
WebRTC call (an aiortc peer, 48 kHz Opus) to our server, one call per utterance, for each
end-of-turn configuration, and prints per transport and configuration:

- false end-of-turns per minute of speech: the bot's answer was heard before the person had
  finished (a loud frame from the bot before the utterance's true end);
- missed ends: a complete question with no answer heard within 2 s of its end;
- end of speech → first bot audio, p50/p95, on the complete questions.

The STT is the offline ASR server (faster-whisper tiny.en, a child process), the LLM the
offline responder, the TTS an instant tone; so the figures are about end-of-turn, not models.

The configurations, in one process one after another: the old default (200 ms of silence),
longer silences (``vad_stop_secs``, issue 13's sweep), Pipecat's Smart Turn strategy, and the
adaptive end of turn (``agent.turns.adaptive_stop``) with the words alone or with Smart Turn,
at two upper bounds, and with the words as tie-breaker (``text_check``: they must ask for an
answer, or may only veto an unfinished ending). ``--runs 2`` repeats the sweep (figures on
shared cores are noisy).

``--set extended`` plays the extended set instead (``tests.fakes.paused_speech.extended``: the
paused English set, English short commands, answers, statements and unfinished sentences, and
the same kinds in German, French and Spanish from espeak-ng), on each line of ``--noise``: clean,
or white noise or babble made from the clean test speech (``tests.fakes.line_noise``) at 20
and 10 dB below the speech, over the whole call (by phone: a noisy line is a phone line; the
clean line by WebRTC too, with ``--transports``); ``babble:20@3`` plays the third draw of the
babble (other stretches of the talkers around the words; ``bench/talker_gate.py``). Rows are
per transport, language and line; a complete turn there is any turn the bot should answer at
once (question, command, answer, finished statement). The offline recognizer is English-only
(tiny.en), so the German, French and Spanish rows test the audio decision (Smart Turn, the
VAD) with whatever English words tiny.en makes of them; Voxtral would write their words.
``--recognizer reference`` puts a stand-in for Voxtral in tiny.en's place
(:mod:`tests.fakes.reference_words`: the script's own words, in every language, behind the
realtime protocol, each final 0.3 s after the STT's final commit), so every row measures the
turn decision with the words a multilingual recognizer gives it, and counts the words it never
wrote: a tail the VAD never heard as speech, which no false end shows. ``--set languages``
plays the same kinds of turn in three more of Voxtral's languages, Italian, Portuguese and
Dutch (``tests.fakes.paused_speech.other_languages``), the same way; with the stand-in, it asks
whether the decision holds in languages no rule or threshold here was tuned on. ``--set
attention`` plays a call for attention, a pause and a question in those seven languages
(``tests.fakes.paused_speech.calls_for_attention``: "Excuse me... where is the nearest
pharmacy", "Entschuldigung... wo ist die nächste Apotheke"), which must not be answered at the
pause. ``--set east-asian`` plays Chinese, Japanese and Korean hesitations, sentences paused on
a conjunction or particle, answers and questions (``tests.fakes.paused_speech.east_asian``);
``--set east-asian-commands`` Chinese and Japanese commands of three characters or more and a
short start that goes on (``east_asian_commands``); ``--set more-scripts`` the same kinds as
east-asian in Russian, Arabic and Hindi (``more_scripts``); ``--set unmarked-questions``
questions the recognizer wrote without their question mark, and starts that go on, in 13
languages (``unmarked_questions``).

    .venv/bin/python -m bench.turn_taking [--configs NAME;NAME] [--transports phone,webrtc]
        [--runs N] [--set paused|extended|languages|attention|east-asian|east-asian-commands|
        more-scripts|unmarked-questions]
        [--noise clean,white:20,babble:10@2]
        [--recognizer tiny.en|reference] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websockets

from bench import machine, peers
from bench.report import publish
from tests.fakes.line_noise import NOISES, Noise, line
from tests.fakes.paused_speech import (
    Utterance,
    calls_for_attention,
    east_asian,
    east_asian_commands,
    extended,
    more_scripts,
    other_languages,
    unmarked_questions,
    utterances,
)
from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.reference_words import ReferenceWords
from tests.fakes.serving import background, free_port
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import FRAME_S, SILENCE, TwilioCaller, payloads, to_ulaw
from tests.fakes.webrtc_caller import CLIENT_RATE, WebRTCClient

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
RESULTS_MD = RESULTS / "turn_taking.md"


@dataclass(frozen=True)
class PlayedSet:
    """A set played language by language, on noisy lines (``--set``): what it plays, where
    its table goes, the table's title."""

    played: Callable[[], tuple[Utterance, ...]]
    results_md: Path
    title: str


SETS = {
    "extended": PlayedSet(
        extended,
        RESULTS / "turn_taking_extended.md",
        "Turn-taking on the extended set: languages, short turns, noisy lines (phone calls)",
    ),
    "languages": PlayedSet(
        other_languages,
        RESULTS / "turn_taking_more_languages.md",
        "Turn-taking in Italian, Portuguese and Dutch (phone calls)",
    ),
    "attention": PlayedSet(
        calls_for_attention,
        RESULTS / "turn_taking_attention.md",
        "Turn-taking after a call for attention, in seven languages (phone calls)",
    ),
    "east-asian": PlayedSet(
        east_asian,
        RESULTS / "turn_taking_east_asian.md",
        "Turn-taking in Chinese, Japanese and Korean (phone calls)",
    ),
    "east-asian-commands": PlayedSet(
        east_asian_commands,
        RESULTS / "turn_taking_east_asian_commands.md",
        "Turn-taking on Chinese and Japanese commands (phone calls)",
    ),
    "more-scripts": PlayedSet(
        more_scripts,
        RESULTS / "turn_taking_more_scripts.md",
        "Turn-taking in Russian, Arabic and Hindi (phone calls)",
    ),
    "unmarked-questions": PlayedSet(
        unmarked_questions,
        RESULTS / "turn_taking_unmarked_questions.md",
        "Turn-taking on questions written without their question mark, in 13 languages "
        "(phone calls)",
    ),
}
ANSWER_WINDOW_S = 2.0
AFTER_S = 3.0
"""Silence the caller sends after the utterance: the answer window and a little more."""
REFERENCE_FINAL_DELAY_S = 0.3
"""The Voxtral stand-in's final, after the final commit (:mod:`tests.fakes.reference_words`)."""
RECOGNIZERS = ("tiny.en", "reference")
_SILENCE = {"end_of_turn": "silence", "smart_turn": False, "vad_floor_margin_db": 0}
_ADAPTIVE = {
    "end_of_turn": "adaptive",
    "vad_stop_secs": 0.2,
    "complete_wait_s": 0.0,
    "text_end_p": 1.01,  # statements on the model's wait: only where a configuration says so
    "words_over_audio": False,  # and so words that ask against Smart Turn's "unfinished"
    "paused_turns_wait": False,  # and so a turn with a pause in it
    "model_over_audio": False,  # and so turns the text model reads finished against it
    "text_question_unfinished_p": 0.0,  # and so questions the model reads going on
    "vad_floor_margin_db": 0,  # and so the VAD's stop at the line's noise floor
}


def _models_wait(veto: float, wait: float, **more: Any) -> dict[str, Any]:
    """Smart Turn and the text model: its veto below ``veto``, statements it reads at p(end)
    >= 0.1 ended after ``wait`` s of quiet; ``more`` on top."""
    return {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": veto,
        "text_end_p": 0.1,
        "text_end_wait_s": wait,
        **more,
    }


_MODEL_OVER_AUDIO = {
    "words_over_audio": True,
    "paused_turns_wait": True,
    "vad_floor_margin_db": 3.0,
    "model_over_audio": True,
}
"""On top of the models' wait, the settings of the default of 2026-12-06 (before
``text_question_unfinished_p``)."""


CONFIGS: dict[str, dict[str, Any]] = {
    "old default: silence, vad_stop 0.2 s": {**_SILENCE, "vad_stop_secs": 0.2},
    "silence, vad_stop 0.5 s": {**_SILENCE, "vad_stop_secs": 0.5},
    "silence, vad_stop 0.8 s": {**_SILENCE, "vad_stop_secs": 0.8},
    "silence + Smart Turn v3 (Pipecat's strategy)": {
        "end_of_turn": "silence",
        "smart_turn": True,
        "vad_stop_secs": 0.2,
    },
    "adaptive, words only, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": False,
        "unfinished_wait_s": 1.3,
    },
    "adaptive + Smart Turn, bound 1.0 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.0,
    },
    "adaptive + Smart Turn, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
    },
    "adaptive + Smart Turn, bound 1.3 s, no talker gate": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "vad_foreground_db": 0,
    },
    "adaptive + Smart Turn decides, words veto only unfinished endings": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_check": "unfinished",
    },
    "+ text model: any turn at p(end) >= 0.2": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_end_p": 0.2,
    },
    "+ text model: any turn at p(end) >= 0.1, asks wait below 0.02": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_end_p": 0.1,
        "text_unfinished_p": 0.02,
    },
    "adaptive + Smart Turn + text-model veto, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": 0.1,
    },
    "adaptive + Smart Turn + text-model veto below 0.01, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": 0.01,
    },
    "adaptive + Smart Turn + text-model veto below 0.01 from three words, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": 0.01,
        "text_veto_min_words": 3,
    },
    "adaptive + Smart Turn + text-model veto below 0.001, bound 1.3 s": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": 0.001,
    },
    **{
        f"+ text-model veto below {veto:g}, statements at p(end) >= 0.1 after {wait:g} s": (
            _models_wait(veto, wait)
        )
        for veto, wait in ((0.01, 0.6), (0.01, 0.8), (0.02, 0.8))
    },
    "+ that, and words that ask end on the model's wait when Smart Turn hears them unfinished": (
        _models_wait(0.02, 0.8, words_over_audio=True)
    ),
    "+ that, and a turn with a pause in it ends on the model's wait at the soonest": (
        _models_wait(0.02, 0.8, words_over_audio=True, paused_turns_wait=True)
    ),
    "+ that, and the VAD hears the caller stop at the line's noise floor": _models_wait(
        0.02, 0.8, words_over_audio=True, paused_turns_wait=True, vad_floor_margin_db=3.0
    ),
    "+ that, and a turn the text model reads finished ends on its wait when Smart Turn hears "
    "it unfinished": _models_wait(0.02, 0.8, **_MODEL_OVER_AUDIO),
    "+ that, and a question the model reads going on (p(end) < 0.001) waits for the bound, "
    "though the recognizer closed it with a question mark": _models_wait(
        0.02, 0.8, **_MODEL_OVER_AUDIO, text_question_unfinished_p=0.001
    ),
    "+ text model: that veto, and any turn at p(end) >= 0.3": {
        **_ADAPTIVE,
        "smart_turn": True,
        "unfinished_wait_s": 1.3,
        "text_model": True,
        "text_unfinished_p": 0.1,
        "text_end_p": 0.3,
    },
}
"""The text-model legs ask the packaged SmolLM2 behind llama.cpp's server, started once for the
run (``turn.text_model_url``): the product's local LLM, here not answering (the echo does)."""
TRANSPORTS = ("phone", "webrtc")


@dataclass
class Outcome:
    utterance: Utterance
    speech_s: float
    false_ends: int
    """Answers that began (after a quiet gap) before the utterance's true end."""
    answered_after_s: float | None
    waits: tuple[str, ...] = ()
    """How each of the call's turns ended, as the adaptive strategy logs it: ``complete`` (the
    short wait), ``waited`` (the upper bound), ``no words``; empty for other strategies."""
    words_unwritten: int | None = None
    """The utterance's words the recognizer never wrote: a tail the VAD never heard as speech
    (answered or not, no false end shows it). Known with the Voxtral stand-in only."""

    @property
    def false_end(self) -> bool:
        return self.false_ends > 0


@dataclass
class Row:
    name: str
    transport: str = "phone"
    outcomes: list[Outcome] = field(default_factory=list)
    language: str = ""
    line: str = "clean"
    recognizer: str = "tiny.en"


Line = tuple[Noise, float, int] | None
"""A noisy line: the noise, how far below the speech (dB) and which draw of it (from 0);
``None``: a clean line."""


def parse_line(text: str) -> Line:
    if text == "clean":
        return None
    kind, _, level = text.partition(":")
    snr, _, draw = level.partition("@")
    if kind not in NOISES or not snr or (draw and not draw.isdigit()) or draw == "0":
        raise ValueError(
            f"a line is 'clean' or NOISE:SNR_DB[@DRAW] with NOISE in {NOISES} and DRAW from 1: "
            f"{text!r}"
        )
    return kind, float(snr), int(draw or 1) - 1  # type: ignore[return-value]


def line_name(noisy: Line) -> str:
    if noisy is None:
        return "clean"
    return f"{noisy[0]} {noisy[1]:g} dB" + (f", draw {noisy[2] + 1}" if noisy[2] else "")


async def play_phone(
    base_url: str,
    utterance: Utterance,
    index: int,
    noisy: Line = None,
    reference: ReferenceWords | None = None,
) -> Outcome:
    """One Twilio call: the utterance as 8 kHz μ-law, then silence (or the line's noise
    throughout); ``reference`` learns when the caller spoke each phrase."""
    url = base_url.replace("http://", "ws://") + "/telephony/twilio/ws"
    pcm, end_s = utterance.audio(8000)
    lead: list[str] = [SILENCE] * int(0.6 / FRAME_S)
    tail: list[str] = [SILENCE] * int(AFTER_S / FRAME_S)
    if noisy is not None:
        before, pcm, after = line(
            pcm, 8000, noisy[0], noisy[1], before_s=0.6, after_s=AFTER_S, draw=noisy[2]
        )
        lead, tail = payloads(to_ulaw(before)), payloads(to_ulaw(after))
    async with websockets.connect(url, compression=None) as ws:
        caller = TwilioCaller(ws, f"CA{index:06d}", stream_sid=f"MZ{index:06d}")
        await caller.start()
        await caller.send(lead)
        began = time.monotonic()
        if reference is not None:
            reference.play(utterance, began)
        await caller.send(payloads(to_ulaw(pcm)))
        await caller.send(tail)
        await caller.stop()
        await caller.close()
    return heard_in_call(utterance, end_s, began, caller.loud_at, reference)


async def play_webrtc(
    base_url: str,
    utterance: Utterance,
    index: int,
    noisy: Line = None,
    reference: ReferenceWords | None = None,
) -> Outcome:
    """One WebRTC call: the utterance at 48 kHz from an aiortc peer, then silence (a clean
    line only: ``noisy`` must be ``None``)."""
    assert noisy is None, "noisy lines are phone lines"
    pcm, end_s = utterance.audio(CLIENT_RATE)
    client = WebRTCClient()
    try:
        response = await client.connect(base_url)
        if response.status_code != 200:
            raise RuntimeError(f"the WebRTC offer was refused: {response.text}")
        for _ in range(750):  # the media path is up once the bot's (silent) audio flows
            if client.frames:
                break
            await asyncio.sleep(0.02)
        else:
            raise RuntimeError("no audio from the bot 15 s after the WebRTC answer")
        await asyncio.sleep(0.6)
        began = time.monotonic()
        if reference is not None:
            reference.play(utterance, began)
        client.mic.say(pcm)
        await asyncio.sleep(end_s + AFTER_S)
    finally:
        await client.close()
    return heard_in_call(utterance, end_s, began, list(client.loud_at), reference)


def heard_in_call(
    utterance: Utterance,
    end_s: float,
    began: float,
    loud_at: list[float],
    reference: ReferenceWords | None,
) -> Outcome:
    """What one call heard of an utterance spoken from ``began`` (the caller's clock), the
    bot's audio loud at ``loud_at``: answers before its true end, the first one after it, how
    the strategy ended its turns, and the words the stand-in never wrote."""
    true_end = began + end_s
    answer = next((t for t in loud_at if t >= true_end), None)
    return Outcome(
        utterance,
        end_s,
        false_ends=answer_starts(loud_at, began, true_end),
        answered_after_s=None if answer is None else answer - true_end,
        waits=taken_waits(),
        words_unwritten=None if reference is None else reference.unwritten,
    )


_SINK: list[int] = []
TURN_ENDS: list[str] = []
"""The adaptive strategy's "turn ends (...)" log lines since the current call began."""


def _turn_end_sink(message: Any) -> None:
    text = str(message)
    if "turn ends (" in text:
        TURN_ENDS.append(text.split("turn ends (", 1)[1].split(")", 1)[0])


def taken_waits() -> tuple[str, ...]:
    waits = tuple(TURN_ENDS)
    TURN_ENDS.clear()
    return waits


def answer_starts(loud_at: list[float], after: float, before: float, gap_s: float = 0.3) -> int:
    """How many separate answers began in ``[after, before)``: loud frames after a quiet gap."""
    starts, previous = 0, -float("inf")
    for t in loud_at:
        if after <= t < before and t - previous > gap_s:
            starts += 1
        previous = t
    return starts


def settings_for(asr_url: str, tts_url: str, turn: dict[str, Any]) -> Any:
    from agent.config import load_settings

    return load_settings(
        "default",
        overrides={
            "server": {"start_local_services": False},
            "stt": {"url": asr_url},
            "llm": {"kind": "echo"},  # turn-taking is measured without a model's time
            "tts": {"kind": "openai", "base_url": f"{tts_url}/v1", "sample_rate": 24_000},
            "turn": turn,
        },
    )


async def measure(name: str, settings: Any, transports: list[str]) -> list[Row]:
    """One server per configuration; the whole set through each transport in turn."""
    from agent.server import create_app

    rows = []
    with background(create_app(settings)) as url:
        for transport in transports:
            play = play_phone if transport == "phone" else play_webrtc
            row = Row(name, transport)
            for index, utterance in enumerate(utterances()):
                row.outcomes.append(await play(url, utterance, index))
            rows.append(row)
            print(summary(row), file=sys.stderr, flush=True)
    return rows


async def measure_extended(
    name: str,
    settings: Any,
    lines: list[Line],
    transports: list[str],
    played: tuple[Utterance, ...],
    reference: ReferenceWords | None = None,
) -> list[Row]:
    """One server per configuration; ``played`` (a set of :data:`SETS`) on each line by phone,
    and on the clean line by WebRTC; one row per transport, language and line."""
    from loguru import logger

    from agent.server import create_app

    if not _SINK:  # once per process: each configuration's server logs to the same sink
        _SINK.append(logger.add(_turn_end_sink, level="DEBUG", filter="agent.turns.adaptive_stop"))
    rows = []
    legs: list[tuple[str, Line]] = [("phone", noisy) for noisy in lines if "phone" in transports]
    if None in lines and "webrtc" in transports:
        legs.append(("webrtc", None))
    with background(create_app(settings)) as url:
        for transport, noisy in legs:
            play = play_phone if transport == "phone" else play_webrtc
            by_language: dict[str, Row] = {}
            for index, utterance in enumerate(played):
                taken_waits()  # lines from the previous call's end belong to no call
                row = by_language.setdefault(
                    utterance.language,
                    Row(
                        name,
                        transport,
                        language=utterance.language,
                        line=line_name(noisy),
                        recognizer="tiny.en" if reference is None else "reference",
                    ),
                )
                row.outcomes.append(await play(url, utterance, index, noisy, reference))
            for row in by_language.values():
                rows.append(row)
                print(summary_extended(row), file=sys.stderr, flush=True)
    return rows


def figures(row: Row) -> tuple[int, float, int, int, str]:
    """False ends, per minute of speech, missed ends, complete turns, latency p50 / p95."""
    minutes = sum(o.speech_s for o in row.outcomes) / 60
    false_ends = sum(o.false_ends for o in row.outcomes)
    complete = [o for o in row.outcomes if o.utterance.complete_question]
    missed = sum(
        o.answered_after_s is None or o.answered_after_s > ANSWER_WINDOW_S for o in complete
    )
    delays = sorted(o.answered_after_s for o in complete if o.answered_after_s is not None)
    latency = (
        f"{1000 * statistics.median(delays):.0f} / {1000 * percentile(delays, 0.95):.0f} ms"
        if delays
        else "-"
    )
    return false_ends, false_ends / minutes, missed, len(complete), latency


def summary_extended(row: Row) -> str:
    false_ends, per_minute, missed, complete, latency = figures(row)
    heard = (
        "audio decision"
        if row.language != "en" and row.recognizer == "tiny.en"
        else "words + audio"
    )
    done = [o for o in row.outcomes if o.utterance.complete_question]
    short = sum(o.waits[-1:] == ("complete",) for o in done)
    finished = sum(o.waits[-1:] == ("finished",) for o in done)
    on_the_model = f" (+ {finished} on the model's wait)" if finished else ""
    unwritten = [o.words_unwritten for o in row.outcomes if o.words_unwritten is not None]
    lost = f"{sum(unwritten)} ({sum(n > 0 for n in unwritten)} utterances)" if unwritten else "-"
    return (
        f"| {row.language} ({heard}) | {row.line}{', WebRTC' if row.transport == 'webrtc' else ''} "
        f"| {row.name} | {false_ends} | {per_minute:.1f} | {missed} of {complete} "
        f"| {short} of {complete}{on_the_model} | {latency} | {lost} |"
    )


UNWRITTEN_NOTE = (
    " Words never written: the utterance's words no VAD segment held (a tail the VAD never "
    "heard as speech), which no false end shows; counted with the stand-in only."
)

EXTENDED_HEADER = [
    "| language | line | configuration | false ends | per minute of speech | missed ends "
    "| complete turns ended on the short wait | complete turn → answer p50 / p95 "
    "| words never written |",
    "|---|---|---|---|---|---|---|---|---|",
]


def summary(row: Row) -> str:
    """One table row: false ends, per minute of speech, missed ends, latency p50 / p95."""
    minutes = sum(o.speech_s for o in row.outcomes) / 60
    false_ends = sum(o.false_ends for o in row.outcomes)
    cut = sum(o.false_end for o in row.outcomes)
    questions = [o for o in row.outcomes if o.utterance.complete_question]
    missed = sum(
        o.answered_after_s is None or o.answered_after_s > ANSWER_WINDOW_S for o in questions
    )
    delays = sorted(o.answered_after_s for o in questions if o.answered_after_s is not None)
    latency = (
        f"{1000 * statistics.median(delays):.0f} / {1000 * percentile(delays, 0.95):.0f} ms"
        if delays
        else "-"
    )
    return (
        f"| {row.transport} | {row.name} | {false_ends} ({cut} of {len(row.outcomes)}) | "
        f"{false_ends / minutes:.1f} | {missed} of {len(questions)} | {latency} |"
    )


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list (with 3 questions, p95 is the slowest)."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


RECOGNIZER_NOTES = {
    "tiny.en": "Languages other than English: the offline recognizer is English-only "
    "(tiny.en), so those rows "
    "test the audio decision (Smart Turn, the VAD), with whatever English words tiny.en makes "
    "of the speech.",
    "reference": "The recognizer is a stand-in for Voxtral (`--recognizer reference`, "
    "`tests/fakes/reference_words.py`): behind the realtime protocol it writes the script's "
    "own words for the words that ended in each VAD segment (inside a phrase, by its letters "
    "spread evenly over its audio), in every language, a fragment before a pause closed with a "
    "full stop and a question with a question mark, each final "
    f"{REFERENCE_FINAL_DELAY_S:g} s after the STT's final commit (Voxtral's 480 ms delay from "
    "the end of speech); talkers behind the caller are never written.",
}


def render_extended(
    runs: list[list[Row]], took_s: float, load: tuple[float, float], set_name: str
) -> str:
    played = SETS[set_name].played()
    minutes = {
        language: sum(u.audio(8000)[1] for u in played if u.language == language) / 60
        for language in dict.fromkeys(u.language for u in played)
    }
    complete = sum(u.complete_question for u in played)
    recognizer = runs[0][0].recognizer if runs and runs[0] else "tiny.en"
    webrtc = any(row.transport == "webrtc" for rows in runs for row in rows)
    lines = [
        f"# {SETS[set_name].title}",
        "",
        f"`python -m bench.turn_taking --set {set_name} --runs {len(runs)}"
        f"{'' if recognizer == 'tiny.en' else ' --recognizer ' + recognizer}`, "
        f"{time.strftime('%Y-%m-%d')}, {machine.describe()}, shared with other sessions (load "
        f"average {load[0]:.1f} at the start, {load[1]:.1f} at the end), {took_s / 60:.1f} min. "
        f"{len(played)} utterances per line ({complete} complete turns; minutes of speech: "
        + ", ".join(f"{k} {v:.2f}" for k, v in minutes.items())
        + "), one call each: "
        + ("by phone on every line, by WebRTC on the clean line" if webrtc else "by phone")
        + ". A false end is an answer heard before the utterance's true "
        "end; a missed end is a complete turn with no answer heard within "
        f"{ANSWER_WINDOW_S:g} s; latency is the end of a complete turn to the first bot audio "
        "heard. " + RECOGNIZER_NOTES[recognizer] + UNWRITTEN_NOTE,
    ]
    for number, rows in enumerate(runs, 1):
        lines += ["", f"## Run {number}", "", *EXTENDED_HEADER, *map(summary_extended, rows)]
    if TEXT_MODEL:
        lines += ["", "The text model (SmolLM2-135M-Instruct, llama.cpp's server, 1 thread):", ""]
        lines += [f"- {name}: {what}" for name, what in TEXT_MODEL.items()]
    lines += [
        "",
        f"Per utterance, run {len(runs)} (false ends · answer heard after its end · how each "
        "turn of the call ended):",
        "",
    ]
    for row in runs[-1]:
        marks = ", ".join(
            f"{o.utterance.kind}{'' if o.utterance.complete_question else ' (paused)'}: "
            f"{o.false_ends or 'ok'} · "
            f"{'-' if o.answered_after_s is None else f'{o.answered_after_s:.2f} s'} · "
            f"{'/'.join(o.waits) or '-'}"
            f"{f' · {o.words_unwritten} word(s) never written' if o.words_unwritten else ''}"
            for o in row.outcomes
        )
        where = f"{row.line}{', WebRTC' if row.transport == 'webrtc' else ''}"
        lines.append(f"- {row.language}, {where}, {row.name}: {marks}")
    return "\n".join(lines) + "\n"


def render(runs: list[list[Row]], took_s: float, load: tuple[float, float]) -> str:
    minutes = sum(u.audio(8000)[1] for u in utterances()) / 60
    questions = sum(u.complete_question for u in utterances())
    lines = [
        "# Turn-taking on the paused-speech set (phone and WebRTC calls, offline ASR)",
        "",
        f"`python -m bench.turn_taking --runs {len(runs)}`, {time.strftime('%Y-%m-%d')}, "
        f"{machine.describe()}, shared with other sessions (load average {load[0]:.1f} at "
        "the start, "
        f"{load[1]:.1f} at the end), {took_s / 60:.1f} min. {len(utterances())} "
        f"utterances ({minutes:.2f} min of speech, {questions} complete questions), one call "
        "each. A false end is an answer (bot audio after a quiet gap) heard before the "
        "utterance's true end; a missed end is a complete question with no answer heard within "
        f"{ANSWER_WINDOW_S:g} s; latency is the end of a complete question to the first bot "
        "audio heard (p95 of three is the slowest).",
    ]
    for number, rows in enumerate(runs, 1):
        lines += [
            "",
            f"## Run {number}",
            "",
            "| transport | configuration | false ends (utterances cut) | per minute of speech "
            "| missed ends | complete question → answer p50 / p95 |",
            "|---|---|---|---|---|---|",
            *(summary(row) for row in rows),
        ]
    lines += ["", f"Per utterance, run {len(runs)} (false ends · answer heard after its end):", ""]
    for row in runs[-1]:
        marks = ", ".join(
            f"{o.utterance.kind}: {o.false_ends or 'ok'} · "
            f"{'-' if o.answered_after_s is None else f'{o.answered_after_s:.2f} s'}"
            for o in row.outcomes
        )
        lines.append(f"- {row.transport}, {row.name}: {marks}")
    return "\n".join(lines) + "\n"


TEXT_MODEL: dict[str, str] = {}
"""Per configuration, what the text model did (answers, their mean time, timeouts, errors)."""


async def run(
    args: argparse.Namespace, asr_url: str | None, text_model_url: str | None = None
) -> list[list[Row]]:
    """The sweep against the offline recognizer at ``asr_url``, or (``None``) against the
    reference words."""
    if asr_url is not None:
        return await sweep(args, asr_url, text_model_url)
    reference = ReferenceWords()
    async with RealtimePeer(
        model=None,
        transcribe=reference.transcribe,
        final_delay_s=REFERENCE_FINAL_DELAY_S,
        keep_audio=False,
    ) as peer:
        return await sweep(args, peer.url, text_model_url, reference)


async def sweep(
    args: argparse.Namespace,
    asr_url: str,
    text_model_url: str | None = None,
    reference: ReferenceWords | None = None,
) -> list[list[Row]]:
    from agent.turns.text_end_of_turn import STATS

    runs: list[list[Row]] = []
    with SpeechServer(voice="tone", sample_rate=24_000) as tts:
        for _ in range(args.runs):
            rows: list[Row] = []
            for name in args.configs:
                turn = dict(CONFIGS[name])
                if turn.get("text_model"):
                    turn["text_model_url"] = text_model_url
                settings = settings_for(asr_url, tts.url, turn)
                before = (
                    STATS.answered,
                    STATS.seconds,
                    STATS.timed_out,
                    STATS.failed,
                    STATS.primed,
                )
                if args.set in SETS:
                    rows += await measure_extended(
                        name,
                        settings,
                        args.noise,
                        args.transports,
                        SETS[args.set].played(),
                        reference,
                    )
                else:
                    rows += await measure(name, settings, args.transports)
                if turn.get("text_model"):
                    answered = STATS.answered - before[0]
                    mean_ms = 1000 * (STATS.seconds - before[1]) / max(answered, 1)
                    TEXT_MODEL[name] = (
                        f"{answered} answers, mean {mean_ms:.0f} ms; "
                        f"{STATS.timed_out - before[2]} timed out, "
                        f"{STATS.failed - before[3]} failed; "
                        f"{STATS.primed - before[4]} conversations read ahead"
                    )
                    print(f"text model, {name}: {TEXT_MODEL[name]}", file=sys.stderr, flush=True)
            runs.append(rows)
    return runs


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", help=f"semicolon list of: {'; '.join(CONFIGS)}")
    parser.add_argument("--transports", default=",".join(TRANSPORTS), help="phone,webrtc")
    parser.add_argument("--runs", type=int, default=1, help="repeat the sweep (noise)")
    parser.add_argument("--set", choices=("paused", *SETS), default="paused")
    parser.add_argument(
        "--noise",
        default="clean,white:20,white:10,babble:20,babble:10",
        help="the lines of a --set but paused: clean or white|babble:SNR_DB[@DRAW]",
    )
    parser.add_argument(
        "--recognizer",
        choices=RECOGNIZERS,
        default="tiny.en",
        help="the offline ASR server, or the reference words (a Voxtral stand-in; not for "
        "--set paused)",
    )
    parser.add_argument("--output", type=Path, help="where to write the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    try:
        args.noise = [parse_line(item.strip()) for item in args.noise.split(",") if item.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    args.configs = [c.strip() for c in args.configs.split(";")] if args.configs else list(CONFIGS)
    args.transports = [t.strip() for t in args.transports.split(",") if t.strip()]
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    if not set(args.transports) <= set(TRANSPORTS) or not args.transports:
        parser.error(f"--transports takes a comma list of {', '.join(TRANSPORTS)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.recognizer == "reference" and args.set not in SETS:
        parser.error("--recognizer reference plays a --set other than paused")
    for utterance in SETS[args.set].played() if args.set in SETS else utterances():
        utterance.audio(8000)  # synthesize the set before anything is timed
        if "webrtc" in args.transports:
            utterance.audio(CLIENT_RATE)
    port = free_port()
    asr = None
    if args.recognizer == "tiny.en":
        argv_asr = [sys.executable, "-m", "agent.cli", "asr-server", "--port", str(port)]
        asr = subprocess.Popen(
            argv_asr, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    llm = None
    llm_url = None
    if any(CONFIGS[name].get("text_model") for name in args.configs):
        llm, text_model = peers.start_local_llm()
        llm_url = str(text_model.base_url)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    try:
        if asr is not None:
            peers.wait_http(f"http://127.0.0.1:{port}/health", asr, timeout_s=120)
        if llm is not None:
            peers.wait_http(f"{llm_url}/models", llm, timeout_s=120)
        asr_url = None if asr is None else f"ws://127.0.0.1:{port}/v1/realtime"
        runs = asyncio.run(run(args, asr_url, llm_url))
    finally:
        if asr is not None:
            peers.stop_process(asr)
        if llm is not None:
            peers.stop_process(llm)
    took, load = time.monotonic() - started, (load_before, os.getloadavg()[0])
    if args.set in SETS:
        report = render_extended(runs, took, load, args.set)
        output = args.output or SETS[args.set].results_md
    else:
        report = render(runs, took, load)
        output = args.output or RESULTS_MD
    publish(report, None if args.no_write else output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
