"""How stable is Smart Turn v3's verdict at the end of a turn, against noise no one can hear?
Offline: the product's Smart Turn input (``agent.fastpath.shared_smart_turn``), no server.

A call test of "Stop." that passed on one machine waited for the bound on another: Smart Turn
read 0.45 where the short wait needs over 0.5. This bench asks how much such a verdict rests
on the audio's last bits. Each utterance of the extended turn-taking set
(``tests.fakes.paused_speech.extended``: 43, in English, German, French and Spanish) is put on
a phone line (8 kHz μ-law, 0.3 s of line before it and 0.192 s after it, where the VAD's stop
asks Smart Turn) and scored as it is, then with white noise added at -80 dBFS (3 of 32768: the
last bits of a PCM16 sample, which a codec, a resampler or another CPU's float rounding moves
as much) and at -60 dBFS (still far under any phone line's own noise), in ``--draws`` draws
each. Per language: how many turns' verdicts **flip** (some draws over 0.5, some not), and
which, with the range of p they read.

    .venv/bin/python -m bench.smart_turn_stability [--draws N] [--output FILE] [--no-write]
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agent.fastpath.shared_smart_turn import smart_turn_features
from agent.turns.smart_turn_batcher import smart_turn_session
from bench import machine
from bench.report import publish
from tests.fakes.paused_speech import LANGUAGES, Utterance, extended
from tests.fakes.twilio_caller import from_ulaw, to_ulaw

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "bench" / "results" / "smart_turn_stability.md"
RATE = 8000
BEFORE_S, AFTER_S = 0.3, 0.192
NOISE_LSB = (3.0, 30.0)
"""White noise's RMS in PCM16 steps: -80 and -60 dBFS."""
COMPLETE = 0.5
"""Smart Turn's threshold: over it, the turn is complete (Pipecat's)."""


@dataclass
class Scored:
    utterance: Utterance
    clean: float
    noisy: dict[float, list[float]]

    def flips(self, lsb: float) -> bool:
        verdicts = {p > COMPLETE for p in [self.clean, *self.noisy[lsb]]}
        return len(verdicts) > 1

    def spread(self, lsb: float) -> str:
        ps = [self.clean, *self.noisy[lsb]]
        return f"{min(ps):.2f}-{max(ps):.2f}"


def turn_on_a_phone_line(utterance: Utterance) -> np.ndarray:
    """The turn as Smart Turn hears it at its end: the line, the caller, the VAD's stop wait,
    through μ-law."""
    pcm, _ = utterance.audio(RATE)
    speech = np.frombuffer(pcm, np.int16)
    audio = np.concatenate(
        [np.zeros(int(BEFORE_S * RATE), np.int16), speech, np.zeros(int(AFTER_S * RATE), np.int16)]
    )
    return from_ulaw(to_ulaw(audio.tobytes())).astype(np.int16)


def probability(segment: np.ndarray) -> float:
    """Smart Turn's p(complete) for one segment, as the product computes it."""
    features = smart_turn_features(segment, RATE)[np.newaxis].astype(np.float32)
    (logits,) = smart_turn_session().run(None, {"input_features": features})
    return float(np.asarray(logits).ravel()[0])


def score(utterance: Utterance, draws: int) -> Scored:
    segment = turn_on_a_phone_line(utterance)
    noisy: dict[float, list[float]] = {}
    for lsb in NOISE_LSB:
        rng = np.random.default_rng(int(lsb))
        noisy[lsb] = [
            probability(
                np.clip(segment + rng.normal(0.0, lsb, segment.size), -32768, 32767).astype(
                    np.int16
                )
            )
            for _ in range(draws)
        ]
    return Scored(utterance, probability(segment), noisy)


def report(scored: list[Scored]) -> list[str]:
    lines = [
        "| language | turns | verdicts that flip, noise at -80 dBFS | at -60 dBFS |",
        "|---|---|---|---|",
    ]
    for language in LANGUAGES:
        mine = [s for s in scored if s.utterance.language == language]
        flips = [sum(s.flips(lsb) for s in mine) for lsb in NOISE_LSB]
        lines.append(f"| {language} | {len(mine)} | {flips[0]} | {flips[1]} |")
    flipping = [s for s in scored if any(s.flips(lsb) for lsb in NOISE_LSB)]
    lines += ["", "Turns whose verdict flips (p as it is; the range at -80 and at -60 dBFS):", ""]
    lines += [
        f'- {s.utterance.language}, {s.utterance.kind}: "{s.utterance.text}" {s.clean:.2f}; '
        f"{s.spread(NOISE_LSB[0])}; {s.spread(NOISE_LSB[1])}"
        for s in flipping
    ]
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--draws", type=int, default=8, help="noise draws per level")
    parser.add_argument("--output", type=Path, help="where to write the table")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    utterances = extended()
    for utterance in utterances:
        utterance.audio(RATE)  # synthesize the set first
    started = time.monotonic()
    scored = [score(utterance, args.draws) for utterance in utterances]
    minutes = (time.monotonic() - started) / 60
    text = "\n".join(
        [
            "# Smart Turn's verdict at the end of a turn, against noise no one can hear",
            "",
            f"`python -m bench.smart_turn_stability`, {time.strftime('%Y-%m-%d %H:%M')}, "
            f"{machine.describe()}, {minutes:.1f} min. {len(utterances)} turns on phone lines "
            f"(8 kHz μ-law), each scored as it is and in {args.draws} draws of white noise at "
            "-80 dBFS and at -60 dBFS; a verdict flips when some of these read over 0.5 and "
            "some do not.",
            "",
            *report(scored),
            "",
        ]
    )
    publish(text, None if args.no_write else (args.output or RESULTS_MD))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
