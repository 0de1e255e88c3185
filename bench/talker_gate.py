"""Does the VAD hear the caller stop when other people talk behind them, and does it leave a
quiet or hissing line alone? Offline: the product's VAD, no server, no clock.

Each utterance of the extended turn-taking set (``tests.fakes.paused_speech.extended``: 43, in
English, German, French and Spanish) is put on a phone line as ``bench/turn_taking.py`` plays
it (0.6 s of the line before the caller, 3 s after; 8 kHz μ-law) and heard by the product's VAD
(``pipelines.services.caller_vad``: the turn settings' thresholds), with the talker gate
(``turn.vad_foreground_db``) and without it:

- on babble (four talkers of the test speech, 20 and 10 dB under the caller, over the whole
  call; ``--draws`` draws of it, each other stretches of the talkers around the caller's
  words, where the first draw is the one ``bench/turn_taking.py`` plays): how many
  utterances the VAD **hears end** (a stop after the true end, within 0.8 s,
  and no start on the talkers in the 2 s after it, where a real call would have the bot's
  answer interrupted or a new turn begun), how many **starts on the talkers** follow the
  caller's end, how many have **no stop after the end** (the VAD stopped inside the
  utterance and never heard the rest, or never stopped), and the stop's delay after the true
  end (p50 / max, of those heard end);
- on a clean line and with white noise at 10 and 20 dB: whether the gate's VAD states equal
  the ungated VAD's **window for window** (it must never act there).

    .venv/bin/python -m bench.talker_gate [--margin DB] [--draws N] [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pipecat.audio.vad.vad_analyzer import VADState

from agent.config import TurnSettings
from agent.vad.batcher import SileroBatcher
from bench import machine
from bench.report import publish
from pipelines.services import caller_vad
from tests.fakes.line_noise import Noise, line
from tests.fakes.paused_speech import Utterance, extended
from tests.fakes.speech import heard_changes
from tests.fakes.twilio_caller import from_ulaw, to_ulaw

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "talker_gate.md"
RATE = 8000
BEFORE_S, AFTER_S = 0.6, 3.0
CHUNK = 512
"""Bytes the VAD is fed at a time: one 32 ms window at 8 kHz."""
HEARD_WITHIN_S = 0.8
QUIET_AFTER_S = 2.0


@dataclass
class Heard:
    stop_after_s: float | None
    """The VAD's first stop at or after the true end, from it; ``None``: none."""
    talker_starts: int
    """Starts after that stop, within :data:`QUIET_AFTER_S` of the true end."""

    @property
    def end_heard(self) -> bool:
        return (
            self.stop_after_s is not None
            and self.stop_after_s <= HEARD_WITHIN_S
            and not self.talker_starts
        )


def phone_line(
    utterance: Utterance, noise: tuple[Noise, float] | None, draw: int = 0
) -> tuple[bytes, float]:
    """The call's audio as the VAD hears it (the line, the caller, the line, through μ-law),
    and where the caller's turn truly ends in it, from the caller's first sample; ``draw``
    picks the noise (:func:`tests.fakes.line_noise.line`)."""
    pcm, end_s = utterance.audio(RATE)
    if noise is None:
        silence = np.zeros(int(BEFORE_S * RATE), np.int16).tobytes()
        audio = silence + pcm + np.zeros(int(AFTER_S * RATE), np.int16).tobytes()
    else:
        before, speech, after = line(
            pcm, RATE, noise[0], noise[1], before_s=BEFORE_S, after_s=AFTER_S, draw=draw
        )
        audio = before + speech + after
    return from_ulaw(to_ulaw(audio)).astype(np.int16).tobytes(), end_s


async def vad_states(audio: bytes, margin_db: float | None, **turn: float) -> list[VADState]:
    """The product's VAD (the turn settings', ``turn`` over them, the gate at ``margin_db`` or
    off) on ``audio``."""
    settings = TurnSettings(vad_foreground_db=margin_db or 0, **turn)
    # One call: each window scored at once, not batched with others.
    vad = caller_vad(settings, batcher=SileroBatcher(max_delay_s=0))
    vad.set_sample_rate(RATE)
    return [
        await vad.analyze_audio(audio[i : i + CHUNK])
        for i in range(0, len(audio) - CHUNK + 1, CHUNK)
    ]


def heard(end_s: float, states: list[VADState]) -> Heard:
    """What the VAD's ``states`` say of an utterance that truly ends at ``end_s``."""
    starts: list[float] = []
    stops: list[float] = []
    for index, state in heard_changes(states):
        at = (index + 1) * CHUNK / 2 / RATE - BEFORE_S
        (starts if state == VADState.SPEAKING else stops).append(at)
    stop = next((s for s in stops if s >= end_s), None)
    talkers = 0 if stop is None else sum(stop < s < end_s + QUIET_AFTER_S for s in starts)
    return Heard(None if stop is None else stop - end_s, talkers)


def babble_row(snr_db: float, draw: int, gate: str, found: list[Heard]) -> str:
    delays = sorted(h.stop_after_s for h in found if h.end_heard and h.stop_after_s is not None)
    delay = (
        f"{1000 * statistics.median(delays):.0f} / {1000 * delays[-1]:.0f} ms" if delays else "-"
    )
    return (
        f"| babble {snr_db:g} dB | {draw + 1} | {gate} | {sum(h.end_heard for h in found)} of "
        f"{len(found)} | {sum(h.stop_after_s is None for h in found)} "
        f"| {sum(h.talker_starts for h in found)} | {delay} |"
    )


async def run(margin_db: float, draws: int = 1) -> list[str]:
    lines = [
        "| line | draw | talker gate | VAD hears the end | no stop after the end "
        "| starts on the talkers after it | stop after the end, p50 / max |",
        "|---|---|---|---|---|---|---|",
    ]
    for snr in (20.0, 10.0):
        for draw in range(draws):
            for gate, margin in (("off", None), (f"on, {margin_db:g} dB", margin_db)):
                found = []
                for utterance in extended():
                    audio, end_s = phone_line(utterance, ("babble", snr), draw)
                    found.append(heard(end_s, await vad_states(audio, margin)))
                lines.append(babble_row(snr, draw, gate, found))
                print(lines[-1], file=sys.stderr, flush=True)
    equal_rows = ["", "| line | gate's VAD states equal the ungated ones |", "|---|---|"]
    for noise in (None, ("white", 10.0), ("white", 20.0)):
        same = 0
        for utterance in extended():
            audio, _ = phone_line(utterance, noise)  # type: ignore[arg-type]
            same += await vad_states(audio, margin_db) == await vad_states(audio, None)
        name = "clean" if noise is None else f"white {noise[1]:g} dB"
        equal_rows.append(f"| {name} | {same} of {len(extended())} utterances |")
        print(equal_rows[-1], file=sys.stderr, flush=True)
    return lines + equal_rows


def offline_vad_bench(
    argv: list[str],
    *,
    doc: str,
    default_margin: float,
    run: Callable[[float], Awaitable[list[str]]],
    title: str,
    summary: Callable[[float], str],
    results_md: Path,
) -> int:
    """What the offline VAD benches share: their arguments (``--margin``, ``--output``,
    ``--no-write``), the set synthesized before the clock starts, ``run(margin)``'s table rows,
    and the report (``title``, then ``summary(minutes taken)``, then the rows) printed and
    written to ``results_md`` or ``--output``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--margin", type=float, default=default_margin)
    parser.add_argument("--output", type=Path, help="where to write the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    for utterance in extended():
        utterance.audio(RATE)  # synthesize the set first
    started = time.monotonic()
    rows = asyncio.run(run(args.margin))
    report = "\n".join([title, "", summary((time.monotonic() - started) / 60), "", *rows, ""])
    publish(report, None if args.no_write else (args.output or results_md))
    return 0


DRAWS = 4
"""Draws of the babble by default: one draw is one set of moments where the talkers happen to
be loud around the caller's words, and the first alone made the gate look better than it was
(``bench/results/talker_gate.md``, first section)."""


def main(argv: list[str]) -> int:
    drawing = argparse.ArgumentParser(add_help=False)
    drawing.add_argument("--draws", type=int, default=DRAWS, help="draws of the babble")
    known, rest = drawing.parse_known_args(argv)
    return offline_vad_bench(
        rest,
        doc=__doc__ or "",
        default_margin=TurnSettings().vad_foreground_db or 6.0,
        run=lambda margin: run(margin, known.draws),
        title="# The talker gate, offline: the product's VAD on the extended set's phone lines",
        summary=lambda minutes: (
            f"`python -m bench.talker_gate`, {time.strftime('%Y-%m-%d')}, {machine.describe()}, "
            f"{minutes:.1f} min. {len(extended())} utterances (en, "
            "de, fr, es), each on a phone line with 0.6 s of it before the caller and 3 s "
            f"after; babble in {known.draws} draws (other stretches of the talkers around "
            "the words; the first is the one `bench/turn_taking.py` plays). The VAD hears the "
            f"end: a stop within {HEARD_WITHIN_S:g} s of the true end and no start on the "
            f"talkers in the {QUIET_AFTER_S:g} s after it. No stop after the end: the VAD "
            "stopped before it and never heard the rest (words lost), or never stopped."
        ),
        results_md=RESULTS_MD,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
