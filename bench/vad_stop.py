"""Where does the VAD hear the caller stop, with the line's floor (``turn.vad_floor_margin_db``)
and without it? Offline: the product's VAD, no server, no clock.

Each utterance of the extended turn-taking set (``tests.fakes.paused_speech.extended``: 43, in
English, German, French and Spanish) is put on a phone line as ``bench/talker_gate.py`` puts it
(8 kHz μ-law, the line before and after the caller) and heard by the product's VAD
(``pipelines.services.caller_vad``) twice, the floor off and on. Per language and line:

- the **end of speech as the VAD reports it** (its last stop less the quiet it counted, which
  is what the stop strategy waits from, and when the STT commits the segment) after the true
  end, p50 and max: the part of every turn's answer time that is the VAD's;
- utterances whose **segments differ** in number (a pause heard or bridged differently; a cut
  inside a phrase would show here) and whose **first start moved** (the floor must never move
  one).

    .venv/bin/python -m bench.vad_stop [--margin DB] [--output FILE] [--no-write]
"""

from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipecat.audio.vad.vad_analyzer import VADState

from agent.config import TurnSettings
from bench import machine
from bench.talker_gate import BEFORE_S, CHUNK, RATE, offline_vad_bench, phone_line, vad_states
from pipelines.services import caller_vad
from tests.fakes.line_noise import Noise
from tests.fakes.paused_speech import extended
from tests.fakes.speech import heard_changes

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "vad_stop.md"
FOREGROUND_DB = TurnSettings().vad_foreground_db
LINES: tuple[tuple[Noise, float] | None, ...] = (
    None,
    ("white", 20.0),
    ("white", 10.0),
    ("babble", 20.0),
    ("babble", 10.0),
)


async def changes(audio: bytes, floor_db: float) -> list[tuple[float, VADState]]:
    """The product's VAD's starts and stops on ``audio`` (seconds from the caller's first
    sample), the floor at ``floor_db`` (0: off)."""
    states = await vad_states(audio, FOREGROUND_DB, vad_floor_margin_db=floor_db)
    return [
        ((index + 1) * CHUNK / 2 / RATE - BEFORE_S, state) for index, state in heard_changes(states)
    ]


@dataclass
class Language:
    """One language on one line: how late each utterance's end was heard, floor off and on."""

    late_off: list[float] = field(default_factory=list)
    late_on: list[float] = field(default_factory=list)
    segments_differ: list[str] = field(default_factory=list)
    starts_moved: int = 0


def heard_end(heard: list[tuple[float, VADState]], end_s: float, stop_secs: float) -> float:
    """The end of speech as the VAD reports it (its last stop less ``stop_secs``), from the
    true end."""
    stops = [at for at, state in heard if state == VADState.QUIET]
    return stops[-1] - stop_secs - end_s if stops else float("nan")


def ms(values: list[float]) -> str:
    return f"{1000 * statistics.median(values):.0f} / {1000 * max(values):.0f} ms"


async def run(margin_db: float) -> list[str]:
    vad = caller_vad(TurnSettings())
    vad.set_sample_rate(RATE)
    stop_secs = vad.params.stop_secs  # the quiet it counts: whole 32 ms windows
    rows = [
        "| line | language | end of speech heard after the true end, p50 / max: floor off "
        f"| floor on ({margin_db:g} dB) | segments differ | first start moved |",
        "|---|---|---|---|---|---|",
    ]
    for noise in LINES:
        name = "clean" if noise is None else f"{noise[0]} {noise[1]:g} dB"
        languages: dict[str, Language] = {}
        for utterance in extended():
            audio, end_s = phone_line(utterance, noise)
            off, on = await changes(audio, 0), await changes(audio, margin_db)
            seen = languages.setdefault(utterance.language, Language())
            seen.late_off.append(heard_end(off, end_s, stop_secs))
            seen.late_on.append(heard_end(on, end_s, stop_secs))
            if len(off) != len(on):
                seen.segments_differ.append(f'"{utterance.text}" {len(off) // 2} → {len(on) // 2}')
            seen.starts_moved += off[:1] != on[:1]
        for language, seen in languages.items():
            rows.append(
                f"| {name} | {language} | {ms(seen.late_off)} | {ms(seen.late_on)} "
                f"| {'; '.join(seen.segments_differ) or 0} | {seen.starts_moved} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main(argv: list[str]) -> int:
    return offline_vad_bench(
        argv,
        doc=__doc__ or "",
        default_margin=TurnSettings().vad_floor_margin_db or 3.0,
        run=run,
        title="# Where the VAD hears the caller stop: the line's floor off and on",
        summary=lambda minutes: (
            f"`python -m bench.vad_stop`, {time.strftime('%Y-%m-%d %H:%M')}, "
            f"{machine.describe()}, {minutes:.1f} min. "
            f"{len(extended())} utterances (en, de, fr, es) on phone lines (8 kHz μ-law), the "
            "product's VAD (the talker gate on). The end of speech as the VAD reports it is its "
            "last stop less the quiet it counted (`turn.vad_stop_secs` in whole 32 ms windows): "
            "the stop strategy's waits count from it, and "
            "the STT commits the segment at the stop."
        ),
        results_md=RESULTS_MD,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
