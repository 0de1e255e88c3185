"""The offline recognizer: a turn is decoded on an encoder window sized to it, not on
Whisper's 30 s, with faster-whisper's full path as the fallback for a doubtful hypothesis."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.local import recognizer as recognizer_module
from agent.local.recognizer import (
    CT2_BACKEND_ENV,
    Hypothesis,
    WhisperRecognizer,
    choose_cpu_backend,
    is_no_speech,
    pcm16_to_float,
)
from agent.stt.audio import resample
from tests.conftest import requires_espeak
from tests.fakes.line_noise import line
from tests.fakes.paused_speech import phrase_audio
from tests.fakes.speech import SENTENCES, speech_at, word_error_rate
from tests.fakes.twilio_caller import from_ulaw, to_ulaw

RATE = 16_000


@pytest.fixture(scope="module")
def whisper() -> Iterator[WhisperRecognizer]:
    pytest.importorskip("faster_whisper", reason="the offline recognizer needs faster-whisper")
    yield WhisperRecognizer()


@requires_espeak
def test_a_turn_is_decoded_on_a_short_window_about_as_well_as_on_the_full_one(
    whisper: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    audio = {s: pcm16_to_float(speech_at(s, RATE)) for s in SENTENCES}
    full = [word_error_rate(s, whisper._full_window(a)) for s, a in audio.items()]
    fallbacks: list[int] = []
    monkeypatch.setattr(whisper, "_full_window", lambda a: fallbacks.append(1) or "")
    short = [word_error_rate(s, whisper.transcribe(a)) for s, a in audio.items()]
    assert not fallbacks, "the short window was not trusted"
    # At most one more word wrong over the six sentences than the full window gets.
    assert sum(short) <= sum(full) + 1 / 7 + 1e-9, (short, full)
    assert max(short) <= 0.2, short


@requires_espeak
@pytest.mark.parametrize("cut_s", [0.15, 0.35])
def test_speech_that_starts_mid_word_is_not_dropped_as_silence(
    whisper: WhisperRecognizer, cut_s: float
) -> None:
    """A turn can reach the server mid-word (a late VAD); the short window then doubts it is
    speech at all (no-speech probability > 0.6) and must not answer "": the full window
    decides, and hears words. Not which ones, nor how many: tiny.en guesses at the cut word,
    and the guess depends on the backend and the CPU (cut at 0.15 s, oneDNN writes "in the
    light of the invocation.", MKL on an Intel Xeon "non-velight syndication.")."""
    speech = pcm16_to_float(speech_at("turn on the lights in the kitchen", RATE))
    text = whisper.transcribe(speech[int(cut_s * RATE) :])
    assert text.split(), "the speech was dropped as silence"


def test_silence_is_no_text(whisper: WhisperRecognizer) -> None:
    assert whisper.transcribe(np.zeros(RATE, np.float32)) == ""
    noise = np.random.default_rng(0).normal(0, 0.005, 2 * RATE).astype(np.float32)
    assert whisper.transcribe(noise) == ""


@pytest.mark.parametrize(
    ("text", "looping"),
    [
        ("Turn on the lights in the kitchen.", False),
        ("Turn on the light in the kitchen turn on the light in", True),
        ("Send the report. Send the report.", True),
        ("No, no, no.", False),  # a word said three times is speech, not a loop
        ("", False),
    ],
)
def test_a_hypothesis_stuck_in_a_loop_is_recognised(text: str, looping: bool) -> None:
    assert recognizer_module._repeats(text) is looping


@requires_espeak
def test_the_text_does_not_depend_on_how_much_quiet_followed_the_speech(
    whisper: WhisperRecognizer,
) -> None:
    """The server decodes a turn up to wherever its last partial reached, so the same speech
    arrives with more or less quiet after it. With the window padded by zero features
    (faster-whisper's way) telephone-band espeak came back as "turn on the life in my
    kitchen" once 0.1 s of its 0.4 s of trailing quiet was cut."""
    sentence = "turn on the lights in the kitchen"
    audio = pcm16_to_float(resample(speech_at(sentence, 8_000), 8_000, RATE))
    texts = {whisper.transcribe(audio[: audio.size - cut * RATE // 10]) for cut in range(4)}
    assert len(texts) == 1, texts
    # The one text tiny.en gives (undithered telephone-band espeak): "turn on my life in my
    # kitchen" on oneDNN, "turn on the lights in my kitchen" on MKL.
    assert word_error_rate(sentence, texts.pop()) <= 0.45


@pytest.mark.parametrize(
    ("text", "empty"),
    [
        ("", True),
        (".", True),
        ("...", True),
        (" - ", True),
        ("Uh.", True),
        ("Um, uh...", True),
        ("Hmm?", True),
        ("You", False),  # whisper's guess on noise, but also a reply ("Who's next?" "You.")
        ("you.", False),
        ("Uh-huh.", False),  # a yes
        ("Uh, yes.", False),
        ("No.", False),
        ("2.", False),
    ],
)
def test_a_hypothesis_of_only_punctuation_or_fillers_is_no_speech(text: str, empty: bool) -> None:
    assert is_no_speech(text) is empty


@pytest.mark.parametrize(("short", "full"), [("Um.", "unused"), (None, "..."), (None, "Hmm.")])
def test_the_recognizer_answers_nothing_when_no_word_was_heard(
    whisper: WhisperRecognizer,
    monkeypatch: pytest.MonkeyPatch,
    short: str | None,
    full: str,
) -> None:
    monkeypatch.setattr(whisper._short, "transcribe", lambda audio: short)
    monkeypatch.setattr(whisper, "_full_window", lambda audio: full)
    assert whisper.transcribe(np.full(RATE, 0.01, np.float32)) == ""


def test_a_word_alone_is_still_an_answer(
    whisper: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(whisper._short, "transcribe", lambda audio: "You.")
    assert whisper.transcribe(np.full(RATE, 0.01, np.float32)) == "You."


@pytest.mark.parametrize(
    ("hypothesis", "answer"),
    [
        (Hypothesis(".", avg_logprob=-1.06, no_speech_prob=0.98), ""),  # noise: no full decode
        (Hypothesis(". . . . . . . .", avg_logprob=-0.15, no_speech_prob=0.98), ""),
        (Hypothesis(".", avg_logprob=-1.06, no_speech_prob=0.3), None),  # speech? full decides
        (Hypothesis("You", avg_logprob=-1.8, no_speech_prob=0.96), None),
        (Hypothesis("Non-velight", avg_logprob=-2.0, no_speech_prob=0.62), None),
        (
            Hypothesis("Turn on the light.", avg_logprob=-0.45, no_speech_prob=0.1),
            "Turn on the light.",
        ),
    ],
)
def test_the_short_window_answers_no_speech_only_when_the_model_agrees(
    whisper: WhisperRecognizer,
    monkeypatch: pytest.MonkeyPatch,
    hypothesis: Hypothesis,
    answer: str | None,
) -> None:
    """Whisper's own silence rule needs the no-speech probability as well as a doubtful
    score; a hypothesis with no word and a high no-speech probability needs no second decode."""
    monkeypatch.setattr(whisper._short, "decode", lambda audio: hypothesis)
    assert whisper._short.transcribe(np.zeros(RATE, np.float32)) == answer


class CountingDecoder:
    """CTranslate2's Whisper model, counting its ``generate`` calls (one per decode)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self.decodes = 0

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        self.decodes += 1
        return self._model.generate(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


def test_a_turn_the_short_window_doubts_is_decoded_once_more_not_again_and_again(
    whisper: WhisperRecognizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller's "um" on a phone line with white noise 10 dB under it: the short window
    doubts its decode, and the full window's greedy decode is doubtful too. faster-whisper
    would retry it at five higher temperatures (a final 1.2 s late,
    ``bench/results/noisy_finals.md``); the recognizer takes the one decode's words."""
    before, speech, after = line(
        phrase_audio("um", 8000).tobytes(), 8000, "white", 10, before_s=0.3, after_s=0.2
    )
    phone = from_ulaw(to_ulaw(before + speech + after)).tobytes()
    audio = pcm16_to_float(resample(phone, 8000, RATE))
    short = whisper._short.decode(audio)
    assert short is not None and not whisper._short.trusted(short), "the short window trusted it"
    counting = CountingDecoder(whisper._model.model)
    monkeypatch.setattr(whisper._model, "model", counting)
    whisper._full_window(audio)
    assert counting.decodes == 1


def test_ctranslate2_is_pinned_to_onednn_unless_the_user_chose() -> None:
    environ: dict[str, str] = {}
    assert choose_cpu_backend(environ, loaded=set()) == "oneDNN"
    assert environ == {CT2_BACKEND_ENV: "0"}
    chosen = {CT2_BACKEND_ENV: "1"}
    assert choose_cpu_backend(chosen, loaded=set()) == "Intel MKL"
    assert chosen == {CT2_BACKEND_ENV: "1"}


def test_a_backend_chosen_too_late_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    environ: dict[str, str] = {}
    with caplog.at_level(logging.WARNING, logger="agent.local.recognizer"):
        assert choose_cpu_backend(environ, loaded={"ctranslate2"}) == "the CPU's default"
    assert environ == {}
    assert f"set {CT2_BACKEND_ENV}=0" in caplog.text


@pytest.mark.parametrize(("setting", "mkl"), [(None, "false"), ("1", "true"), ("0", "false")])
def test_the_loaded_model_runs_on_the_chosen_backend(setting: str | None, mkl: str) -> None:
    """What CTranslate2 itself reports when the recognizer loads in a fresh process."""
    pytest.importorskip("faster_whisper", reason="the offline recognizer needs faster-whisper")
    env = {k: v for k, v in os.environ.items() if k != CT2_BACKEND_ENV}
    env |= {"CT2_VERBOSE": "1"} | ({CT2_BACKEND_ENV: setting} if setting else {})
    root = Path(__file__).resolve().parents[3]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    code = "from agent.local.recognizer import WhisperRecognizer; WhisperRecognizer(cpu_threads=1)"
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert f"Use Intel MKL: {mkl}" in run.stderr, run.stderr
