"""The foreground gate: speech windows from talkers behind the caller are refused, before the
caller's first word and for as long as they talk, lulls included; a quiet or hissing line's are
never touched, the caller's own soft speech never reads as talkers, and a caller who gets
quieter is heard again while still clearly over the talkers."""

from __future__ import annotations

import numpy as np
import pytest

from agent.vad.foreground import ForegroundTalker, window_power

WINDOW_S = 0.032
SAMPLES = 256  # 32 ms at 8 kHz
SETTLE = round(0.2 / WINDOW_S)
"""Windows the line's short-term level takes to follow a step down (its 0.1 s average)."""


def window(db: float, seed: int = 0) -> bytes:
    """32 ms of noise at ``db`` dB full scale (RMS), as PCM16."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(SAMPLES)
    scaled = noise / np.sqrt(np.mean(noise**2)) * 32768 * 10 ** (db / 20)
    return np.clip(np.round(scaled), -32768, 32767).astype(np.int16).tobytes()


def feed(
    gate: ForegroundTalker,
    db: float,
    seconds: float,
    *,
    voiced: bool,
    loud: bool = True,
    in_turn: bool,
    confidence: float | None = None,
) -> list[bool]:
    """The gate's answers for ``seconds`` of windows at ``db``: ``voiced`` if Silero calls
    them speech (``confidence``: by default 0.9, or 0 for no voice at all), ``loud`` if they
    pass the VAD's volume test too, ``in_turn`` while the VAD is in a segment of the caller's
    speech."""
    count = round(seconds / WINDOW_S)
    score = (0.9 if voiced else 0.0) if confidence is None else confidence
    return [
        gate.is_caller(
            window_power(window(db, seed=i)),
            confidence=score,
            voiced=voiced,
            speech=voiced and loud,
            between_turns=not in_turn,
        )
        for i in range(count)
    ]


def refused_within(after: list[bool], seconds: float, what: str) -> int:
    """Assert that the gate's answers ``after`` refuse the talkers within ``seconds`` (``what``
    says how it failed otherwise); returns the first refused window."""
    assert False in after, what
    refused_from = after.index(False)
    assert refused_from * WINDOW_S <= seconds, f"refused only after {refused_from * WINDOW_S} s"
    return refused_from


def talkers_then_the_caller(gate: ForegroundTalker, caller_db: float = -20) -> None:
    """A second of talkers at -32 dB while the caller is quiet (too soft for the VAD to start
    on), then the caller at ``caller_db`` for 1.5 s."""
    assert not any(feed(gate, -32, 1.0, voiced=True, loud=False, in_turn=False))
    assert all(feed(gate, caller_db, 1.5, voiced=True, in_turn=True))


def a_quiet_line_then_the_caller(gate: ForegroundTalker, caller_s: float) -> None:
    """A second of silence, then the caller at -20 dB for ``caller_s``."""
    feed(gate, -90, 1.0, voiced=False, in_turn=False)
    assert all(feed(gate, -20, caller_s, voiced=True, in_turn=True))


def test_on_a_quiet_line_every_speech_window_is_the_callers() -> None:
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=1.0)
    # A soft word 20 dB under the caller's level, between pauses: still theirs.
    feed(gate, -90, 0.5, voiced=False, in_turn=True)
    assert all(feed(gate, -40, 0.25, voiced=True, in_turn=True))


def test_the_callers_own_soft_speech_never_switches_the_gate_on() -> None:
    """A clean phrase that fades: its soft syllables are under the caller's level for a long
    stretch, and still theirs (a gate that learned the background from them clipped "table"
    to "thing")."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=0.5)
    assert all(feed(gate, -30, 1.5, voiced=True, in_turn=True))


def test_on_a_hissing_line_the_callers_soft_words_still_count() -> None:
    """Steady noise Silero does not call speech: the background is no talker."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    feed(gate, -35, 1.0, voiced=False, in_turn=False)
    for _ in range(3):
        assert all(feed(gate, -20, 0.6, voiced=True, in_turn=True))
        assert all(feed(gate, -30, 0.6, voiced=True, in_turn=True))
        feed(gate, -35, 0.4, voiced=False, in_turn=True)


@pytest.mark.parametrize("caller_db", [-20, -12])
def test_talkers_behind_the_caller_are_refused_once_the_caller_stops(caller_db: float) -> None:
    """Within 0.2 s, however far the caller is over the talkers: the window's own level, not
    the line's 0.1 s average, must clear the talkers by the margin (the average took 0.35 s
    to fall 20 dB, and every turn on a line with talkers 20 dB down ended that much later)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate, caller_db)
    # The caller stops; the talkers go on, now loud enough for the VAD's volume test.
    after = feed(gate, -32, 2.0, voiced=True, in_turn=True)
    refused_from = refused_within(after, 0.2, "the talkers were taken for the caller")
    assert not any(after[refused_from:]), "the talkers were heard again"


def test_a_pause_of_the_callers_into_silence_switches_the_gate_off() -> None:
    """The talkers fell silent: the caller's soft words count again at once."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate)
    feed(gate, -90, 0.3, voiced=False, in_turn=True)
    assert all(feed(gate, -30, 1.0, voiced=True, in_turn=True))


def test_talkers_heard_only_inside_the_callers_turn_are_refused_once_they_go_on_alone() -> None:
    """Talkers the gate did not know when the VAD started (the caller spoke within half a
    second of the call's start, or Silero was unsure of them at first): the VAD is in the
    caller's segment from then on, so there is no quiet between turns to learn them in. Once
    the line has stayed far under the caller for a while, they are learned there, and the VAD
    hears the caller stop (before, it never did: on other draws of the bench's babble at
    20 dB, a third of the turns never ended). A voice Silero is sure of, 12 dB under the
    caller for 0.3 s, is talkers at once: the gate acts from the next window (0.9 s into them
    before it did, from the share of the background alone)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=1.5)
    after = feed(gate, -38, 2.0, voiced=True, in_turn=True)
    # The line's 0.1 s average takes about 0.22 s to fall 12 dB under the caller, then 0.3 s.
    refused_from = refused_within(
        after, 0.6, "the talkers were taken for the caller for as long as they talked"
    )
    assert not any(after[refused_from:]), "the talkers were heard again"


def test_talkers_in_a_lull_of_the_gate_start_no_turn_far_under_the_caller() -> None:
    """The talkers' voices dip for a quarter second (no voice at all), which switches the gate
    off; they come back 18 dB under the caller, and still start no turn (before, they did, in
    17 of 43 utterances on the bench's fourth draw of the babble at 20 dB)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate, caller_db=-14)
    feed(gate, -36, 0.3, voiced=False, confidence=0.05, in_turn=False)
    assert not any(feed(gate, -32, 1.0, voiced=True, in_turn=False))


@pytest.mark.parametrize("pause_s", [0.15, 0.6])
def test_on_a_quiet_line_a_caller_back_much_softer_after_a_pause_is_still_the_caller(
    pause_s: float,
) -> None:
    """A voice far under the caller's level is someone else's only where it took over from the
    caller with no voiceless break, and starts no turn only where someone else has been heard:
    on a quiet line, a caller 20 dB softer after a pause (within the turn, or after its end)
    is still the caller (before, taken for talkers within half a second)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=1.0)
    between_turns = pause_s > 0.2  # the VAD stopped in the pause
    feed(gate, -90, pause_s, voiced=False, in_turn=not between_turns)
    if between_turns:
        assert all(feed(gate, -40, 0.1, voiced=True, in_turn=False)), "no turn started"
    assert all(feed(gate, -40, 2.0, voiced=True, in_turn=True))


def test_a_soft_first_syllable_after_a_pause_starts_a_turn_where_talkers_were_heard() -> None:
    """After a quiet pause the line's short-term level lags the caller's first syllable by 5 dB
    and more; the window's own level, 10 dB under the caller, is what counts."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate, caller_db=-14)
    feed(gate, -90, 0.5, voiced=False, in_turn=False)  # the talkers stopped too
    assert all(feed(gate, -24, 0.2, voiced=True, in_turn=False))


def test_talkers_within_the_callers_turn_but_near_their_level_are_not_learned() -> None:
    """Under 12 dB beneath the caller, a voice inside the turn may be the caller's own softer
    speech: it is never learned as the background there (the price of never mistaking it)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=1.5)
    assert all(feed(gate, -30, 2.0, voiced=True, in_turn=True))


def test_the_callers_dips_between_syllables_never_switch_the_gate_on() -> None:
    """Inside a phrase the line dips far under the caller for a consonant or a gap between
    words, 0.2 s at most: not long enough to be taken for someone else's voice."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    a_quiet_line_then_the_caller(gate, caller_s=0.5)
    for _ in range(10):
        assert all(feed(gate, -45, 0.2, voiced=True, in_turn=True))
        assert all(feed(gate, -20, 0.15, voiced=True, in_turn=True))


def test_talkers_stay_refused_through_the_lulls_in_their_voices() -> None:
    """Talkers leave half-seconds where Silero is unsure (0.3-0.5): no voice the VAD counts,
    but no silence either. Refused talkers still count as what the background is, so the
    gate holds for as long as they talk (before, each lull let them in within a second of the
    caller's end, and the VAD started a turn on them)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate)
    assert not any(feed(gate, -32, 1.0, voiced=True, in_turn=False)[SETTLE:])
    for _ in range(8):
        feed(gate, -34, 0.5, voiced=False, confidence=0.35, in_turn=False)
        assert not any(feed(gate, -32, 1.0, voiced=True, in_turn=False))


def test_talkers_heard_before_the_callers_first_word_are_not_taken_for_the_caller() -> None:
    """Talkers on the line before the caller speaks: once the gate knows them, their speech
    is refused even though no caller's level is known yet, and the caller's first short word
    ("Yes.") is heard over them and ends (before, the first window the VAD passed set the
    caller's level, the talkers' own, and they were the caller from then on)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    assert not any(feed(gate, -32, 0.6, voiced=True, loud=False, in_turn=False))
    assert not any(feed(gate, -31, 0.5, voiced=True, in_turn=False))
    assert all(feed(gate, -20, 0.35, voiced=True, in_turn=True))
    assert not any(feed(gate, -32, 2.0, voiced=True, in_turn=True)[SETTLE:])


def test_talkers_from_the_calls_first_moment_are_known_within_half_a_second() -> None:
    """Half a second of talkers Silero is sure of only two windows in three, then the caller
    at once: the talkers are already known when the caller stops (before, the half-second
    average had not yet reached them, and the VAD stayed in the caller's turn on them)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    for _ in range(5):
        assert not any(feed(gate, -32, 2 * WINDOW_S, voiced=True, loud=False, in_turn=False))
        feed(gate, -33, WINDOW_S, voiced=False, confidence=0.35, in_turn=False)
    assert all(feed(gate, -20, 1.0, voiced=True, in_turn=True))
    after = feed(gate, -32, 1.0, voiced=True, in_turn=True)
    refused_within(after, 0.2, "the talkers were taken for the caller")


def test_talkers_silero_is_sure_of_only_half_the_time_are_known_before_the_caller_speaks() -> None:
    """Four talkers 20 dB under the caller are speech to Silero in about half of their
    windows (unsure, 0.3-0.5, in the rest): the gate knows them once the caller speaks, and
    refuses them as soon as the caller stops (before, it knew them only from a share of one
    half, and refused them only once they had stayed far under the caller after the turn)."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    for _ in range(20):  # 45 % voiced
        for voiced in (True, False, True, False, False, True, False, True, False, False):
            feed(
                gate,
                -33,
                WINDOW_S,
                voiced=voiced,
                loud=False,
                confidence=0.9 if voiced else 0.35,
                in_turn=False,
            )
    assert all(feed(gate, -20, 1.0, voiced=True, in_turn=True))
    after = feed(gate, -33, 1.0, voiced=True, in_turn=True)
    refused_within(after, 0.2, "the talkers were taken for the caller")


def test_one_soft_voiced_window_at_the_start_does_not_switch_the_gate_on() -> None:
    """The caller's own first syllable, in the call's first window and too soft for the VAD's
    volume test, is not talkers."""
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    feed(gate, -40, WINDOW_S, voiced=True, loud=False, in_turn=False)
    assert all(feed(gate, -20, 0.5, voiced=True, in_turn=True))
    assert all(feed(gate, -38, 0.25, voiced=True, in_turn=True))


def test_a_caller_who_gets_quieter_is_heard_while_still_over_the_talkers() -> None:
    gate = ForegroundTalker(margin_db=6, window_s=WINDOW_S)
    talkers_then_the_caller(gate)
    feed(gate, -32, 1.0, voiced=True, in_turn=False)  # talkers behind: refused
    # The caller moves the phone away: 10 dB quieter, still 8 dB over the talkers.
    assert all(feed(gate, -22, 2.0, voiced=True, in_turn=True))
    # Within the margin of the talkers, the caller cannot be told from them by level.
    assert not any(feed(gate, -29, 2.0, voiced=True, in_turn=True)[SETTLE:])


@pytest.mark.parametrize("margin", [0, -3])
def test_the_margin_must_be_positive(margin: float) -> None:
    with pytest.raises(ValueError, match="positive"):
        ForegroundTalker(margin_db=margin, window_s=WINDOW_S)
