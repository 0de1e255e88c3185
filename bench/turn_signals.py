"""What each end-of-turn signal says at every pause of the paused-speech set, offline.

For each phrase of ``tests/fakes/paused_speech.py`` (a pause follows it, or the turn ends):
what tiny.en writes for it (as our STT would send it, one final per stretch of speech),
whether the words so far read as a complete question or request
(:func:`agent.turns.completeness.asks_for_answer`), and Smart Turn v3's
probability that the turn is complete, fed the audio so far two ways:

- ``phone``: 8 kHz through μ-law and back (what a phone call carries), which Pipecat's
  ``LocalSmartTurnAnalyzerV3`` resamples to 16 kHz itself (soxr, as on a live call);
- ``16 kHz``: the same voice rendered at 16 kHz directly: the audio the model was trained on.

A signal is good if it says "complete" only on the ``END`` rows. No server, no clock: this
explains the sweep in ``bench/turn_taking.py``, it does not time anything.

    .venv/bin/python -m bench.turn_signals
"""

from __future__ import annotations

import sys

import numpy as np
import soxr

from agent.local.recognizer import WhisperRecognizer
from agent.turns.completeness import asks_for_answer
from tests.fakes.paused_speech import phrase_audio, utterances
from tests.fakes.twilio_caller import from_ulaw, to_ulaw

TAIL_S = 0.25
"""Quiet after the phrase when Smart Turn is asked (the VAD's stop wait, about)."""


def main() -> int:
    from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

    recognizer = WhisperRecognizer(cpu_threads=1)
    smart_turn = LocalSmartTurnAnalyzerV3()

    def complete(audio: np.ndarray, rate: int) -> float:
        smart_turn.set_sample_rate(rate)
        return float(smart_turn._predict_endpoint(audio.astype(np.float32) / 32768)["probability"])

    print("| utterance | at | tiny.en heard | words: complete | Smart Turn, phone | 16 kHz |")
    print("|---|---|---|---|---|---|")
    for utterance in utterances():
        heard, phone, wide = "", [], []
        for index, phrase in enumerate(utterance.phrases):
            narrow = phrase_audio(phrase, 8000)
            text = recognizer.transcribe(
                soxr.resample(narrow.astype(np.float32) / 32768, 8000, 16000)
            )
            heard = f"{heard} {text}".strip()
            phone.append(narrow)
            wide.append(phrase_audio(phrase, 16000))
            on_the_line = from_ulaw(to_ulaw(np.concatenate(phone).tobytes()))
            tail8, tail16 = np.zeros(int(TAIL_S * 8000)), np.zeros(int(TAIL_S * 16000))
            p_phone = complete(np.concatenate([on_the_line, tail8]), 8000)
            p_wide = complete(np.concatenate([*wide, tail16]), 16000)
            last = index == len(utterance.phrases) - 1
            print(
                f"| {utterance.kind} | {'END' if last else 'pause'} | {text} | "
                f"{'yes' if asks_for_answer(heard) else 'no'} | "
                f"{p_phone:.2f} | {p_wide:.2f} |"
            )
            if not last:
                gap = utterance.pauses_s[index]
                phone.append(np.zeros(int(gap * 8000), np.int16))
                wide.append(np.zeros(int(gap * 16000), np.int16))
    return 0


if __name__ == "__main__":
    sys.exit(main())
