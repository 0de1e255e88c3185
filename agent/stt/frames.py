"""The one frame this STT adds to Pipecat's vocabulary.

A turn strategy that waits for "the final transcript" has to know how many are coming. Pipecat's
``TranscriptionFrame(finalized=True)`` says what was heard, but nothing is said for a stretch
of speech with no words (a cough, or a word too short for the recognizer alone), so a strategy
counting one final per VAD segment waits for a frame that never comes. This service answers
every VAD segment, words or not, with :class:`SpeechSegmentTranscribedFrame`, in order, right
after the segment's ``TranscriptionFrame`` when it had one. Processors that do not know the
frame pass it on untouched, so any Pipecat bot can use the service as it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipecat.frames.frames import DataFrame


@dataclass
class SpeechSegmentTranscribedFrame(DataFrame):
    """The STT is done with one VAD segment of the user's speech.

    Parameters:
        text: The segment's final transcript as sent in the ``TranscriptionFrame`` before
            this frame; ``""`` when the recognizer heard no words in it. A short segment with
            no words is not lost: its audio is transcribed again at the front of the next
            segment, whose transcript then carries its words.
    """

    text: str
    # Never dropped by an interruption: a turn strategy counting segments would wait forever.
    interruptible: bool = field(default=False, init=False)
