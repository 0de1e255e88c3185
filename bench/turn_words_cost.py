"""What reading the words costs the stop strategy per final transcript, as a turn grows.

Each final transcript of a turn runs the words rule (:mod:`agent.turns.completeness`) on the
turn's words so far, on the event loop every call of the process shares: whether they ask for
an answer, whether they stop unfinished, how many words they hold (the text model's veto), and
for each earlier segment whether the caller hesitated there (``paused_turns_wait``). Chinese
and Japanese go through BudouX's phrase model, English through a regular expression only, so
this plays one turn per language and form, one final per segment of about twenty characters,
and times the rule on the last final, the earlier ones read before it as the strategy reads
them; English, in the same run, is the baseline.

    .venv/bin/python -m bench.turn_words_cost [--segments 10,50,200] [--no-write]
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from agent.turns.adaptive_stop import beyond_the_veto
from agent.turns.completeness import asks_for_answer, cjk_words, ends_unfinished, words
from agent.turns.turn_segments import TurnSegments
from bench.machine import describe
from bench.report import publish

RESULTS_MD = Path(__file__).parent / "results" / "turn_words_cost.md"
SEGMENTS = {
    "English": "i would like to book a table for two people",
    "Chinese": "我想要一杯咖啡和一块蛋糕然后明天去公园",
    "Japanese": "コーヒーをふたつくださいそれからケーキもおねがいします",
}
"""One segment's words per language (a VAD segment's final, without its closing mark)."""
FORMS = {
    "each segment closed with a full stop": ("。", False),
    "no marks": ("", False),
    "no marks, one long segment": ("", True),
}
"""How the recognizer writes the turn: each segment's final closed (Voxtral punctuates), none
closed, or the whole turn in one final without a mark (a recognizer repeating itself): one
run of characters, the worst case for Chinese and Japanese. Finals are joined with a space,
as the strategy joins them."""


def decide(turn: TurnSegments) -> None:
    """What the strategy reads of the words on a final transcript (``turn``: its segments)."""
    text = " ".join(turn.texts)
    asks_for_answer(text)
    ends_unfinished(text)
    beyond_the_veto(text)
    turn.hesitated_before_last_words()


def segments_of(segment: str, mark: str, one_final: bool, count: int) -> list[str]:
    """A turn of ``count`` segments, each its own (numbered: a recognizer's finals differ),
    closed by ``mark``; or all of them in one final."""
    if one_final:
        return [("" if " " not in segment else " ").join([segment + mark] * count)]
    return [f"{segment}{i}{mark}" for i in range(count)]


def last_final_us(finals: list[str], repeats: int) -> float:
    """Microseconds the turn's last final costs, the earlier ones read before it as the
    strategy reads them (the best of ``repeats``)."""
    best = float("inf")
    for _ in range(repeats):
        cjk_words.cache_clear()
        turn = TurnSegments()
        for final in finals[:-1]:
            turn.append(final)
            words(final)
            turn.hesitated_before_last_words()
        turn.append(finals[-1])
        started = time.perf_counter()
        decide(turn)
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", default="1,10,50,200", help="turn lengths, in segments")
    parser.add_argument("--repeats", type=int, default=5, help="timings per cell; the best")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.segments.split(",")]
    started, load = time.monotonic(), os.getloadavg()[0]
    lines = [
        "# What reading the words costs per final transcript",
        "",
        f"`python -m bench.turn_words_cost`, {datetime.date.today()}, {describe()}, load "
        f"average {load:.1f} at the start. The words rule on the last final of a turn of N "
        "segments (asks for an answer, ends unfinished, the veto's word count, the hesitation "
        "check over the earlier segments), the best of "
        f"{args.repeats}; a segment is about 20 characters. Ratio: against English at the "
        "same length, in this run.",
        "",
    ]
    for form, (mark, one_final) in FORMS.items():
        lines += [
            f"## {form}",
            "",
            "| segments | " + " | ".join(f"{name} µs" for name in SEGMENTS) + " | ratios |",
            "|---|" + "---|" * (len(SEGMENTS) + 1),
        ]
        for count in counts:
            cost = {
                name: last_final_us(segments_of(segment, mark, one_final, count), args.repeats)
                for name, segment in SEGMENTS.items()
            }
            base = cost["English"]
            ratios = ", ".join(
                f"{name} {cost[name] / base:.1f}x" for name in SEGMENTS if name != "English"
            )
            cells = " | ".join(f"{cost[name]:.0f}" for name in SEGMENTS)
            lines.append(f"| {count} | {cells} | {ratios} |")
        lines.append("")
    lines.append(f"Took {time.monotonic() - started:.1f} s.")
    publish("\n".join(lines) + "\n", None if args.no_write else RESULTS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
