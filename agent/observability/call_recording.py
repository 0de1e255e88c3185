"""Optional recording of a call, both sides, as one stereo WAV (caller left, bot right).

``records.recording = true`` writes ``<records.directory>/recordings/YYYY-MM-DD/<call id>.wav``
(the day the call started, UTC) as 16-bit PCM at the pipeline's rate (8 kHz on a phone call,
16 kHz on WebRTC). Its path is in the call record (``recording``).

Why not Pipecat's ``AudioBufferProcessor``: it is a pipeline stage that must see the caller's
audio pass by, which ours stops at the STT; it resamples every frame through a stream
resampler; and it holds the call in memory until it hands it over. This is an observer of
the frames the transports push anyway (caller audio from the input transport, bot audio
from the output transport as it is written to the caller), so the pipeline is unchanged;
nothing is resampled when both sides run at one rate (always, on our phone and WebRTC
paths); and it hands the disk a second of audio at a time, on one writer thread shared by
all calls. Alignment mirrors that processor (Pipecat 1.14,
``pipecat.processors.audio.audio_buffer_processor``: ``_process_recording``): before one
side's audio is added, the other side is padded with silence up to the same position
(unless that side is mid-utterance), and a wall-clock gap of over 200 ms in one side is
filled with silence, so the two tracks stay in step with the call.

A disk that fails or falls behind (over :data:`MAX_QUEUED_BYTES` waiting) costs the
recording, never the call: the error is logged once per recording (and, for a disk that
falls behind, kept in the call's record too). A call that never carried audio has no file
and its record says ``recording: null``.
"""

from __future__ import annotations

import asyncio
import threading
import time
import wave
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InputAudioRawFrame,
    OutputAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport

from agent.calls import Call
from agent.stt.audio import PcmAudio, to_target

FLUSH_S = 1.0
"""Audio handed to the writer thread at a time."""

MAX_SKEW_S = 10.0
"""One side may run this far ahead of the other before the other is padded to match."""

GAP_S = 0.2
"""A pause in one side's audio longer than this is filled with silence (as Pipecat does)."""

MAX_QUEUED_BYTES = 32 * 1024 * 1024
"""Audio waiting for the disk, all calls together (about 35 min of 8 kHz stereo)."""

_WATCHED = (
    InputAudioRawFrame,
    OutputAudioRawFrame,
    UserStartedSpeakingFrame,
    UserStoppedSpeakingFrame,
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
)


def recording_path(directory: Path, call: Call) -> Path:
    day = time.strftime("%Y-%m-%d", time.gmtime(call.started_at))
    return directory / "recordings" / day / f"{call.id}.wav"


class CallRecordings:
    """Where the WAVs of one server go, and the one thread that writes them all."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recordings")
        self._files: dict[Path, wave.Wave_write | None] = {}  # writer thread only
        self._lock = threading.Lock()
        self.queued_bytes = 0

    def recorder(self, call: Call) -> CallAudioRecorder:
        """The observer that records ``call``; sets ``call.recording``."""
        path = recording_path(self.directory, call)
        call.recording = str(path)
        return CallAudioRecorder(call, path, self)

    def write(self, path: Path, sample_rate: int, caller: bytes, bot: bytes) -> bool:
        """Queue stereo audio for ``path``; ``False`` (nothing queued) when the disk is too
        far behind."""
        size = len(caller) + len(bot)
        with self._lock:
            if self.queued_bytes + size > MAX_QUEUED_BYTES:
                return False
            self.queued_bytes += size
        self._executor.submit(self._write, path, sample_rate, caller, bot)
        return True

    def finish(self, path: Path) -> None:
        self._executor.submit(self._close, path)

    async def close(self) -> None:
        await asyncio.to_thread(self._executor.shutdown, wait=True)

    # ------------------------------------------------------------------ writer thread

    def _write(self, path: Path, sample_rate: int, caller: bytes, bot: bytes) -> None:
        with self._lock:
            self.queued_bytes -= len(caller) + len(bot)
        try:
            if path not in self._files:
                self._files[path] = _open_wav(path, sample_rate)
            out = self._files[path]
            if out is None:
                return  # this recording already failed
            stereo = np.empty(len(caller), "<i2")  # len(caller) bytes = 2 tracks of n samples
            stereo[0::2] = np.frombuffer(caller, "<i2")
            stereo[1::2] = np.frombuffer(bot, "<i2")
            out.writeframes(stereo.tobytes())
        except (OSError, wave.Error) as exc:
            logger.error(
                f"recording {path} stopped: {exc}. The call goes on unrecorded; free space on "
                "that disk or fix records.directory"
            )
            self._drop(path)

    def _close(self, path: Path) -> None:
        out = self._files.pop(path, None)
        if out is not None:
            try:
                out.close()
            except (OSError, wave.Error) as exc:
                logger.error(f"recording {path} could not be closed: {exc}")

    def _drop(self, path: Path) -> None:
        out = self._files.get(path)
        self._files[path] = None
        if out is not None:
            try:
                out.close()
            except (OSError, wave.Error):
                pass


def _open_wav(path: Path, sample_rate: int) -> wave.Wave_write:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    out = wave.open(str(path), "wb")  # closed by _close, on the same thread
    path.chmod(0o600)
    out.setnchannels(2)
    out.setsampwidth(2)
    out.setframerate(sample_rate)
    return out


class CallAudioRecorder(BaseObserver):
    """Records one call's two sides into its WAV (see the module docstring)."""

    def __init__(self, call: Call, path: Path, recordings: CallRecordings) -> None:
        super().__init__(observe_every_push=False)
        self._call = call
        self._path = path
        self._recordings = recordings
        self._rate = 0
        self._caller = bytearray()
        self._bot = bytearray()
        self._caller_at: float | None = None  # monotonic time of the last caller audio
        self._bot_at: float | None = None
        self._user_speaking = False
        self._bot_speaking = False
        self._failed = False

    async def on_push_frame(self, data: FramePushed) -> None:
        frame = data.frame
        if not isinstance(frame, _WATCHED):
            return
        if isinstance(frame, InputAudioRawFrame):
            if isinstance(data.source, BaseInputTransport):
                self._add(frame.audio, frame.sample_rate, frame.num_channels, caller=True)
        elif isinstance(frame, OutputAudioRawFrame):
            if isinstance(data.source, BaseOutputTransport) and data.direction is (
                FrameDirection.DOWNSTREAM
            ):
                self._add(frame.audio, frame.sample_rate, frame.num_channels, caller=False)
        elif isinstance(frame, UserStartedSpeakingFrame | UserStoppedSpeakingFrame):
            self._user_speaking = isinstance(frame, UserStartedSpeakingFrame)
        elif isinstance(data.source, BaseOutputTransport):
            self._bot_speaking = isinstance(frame, BotStartedSpeakingFrame)

    async def cleanup(self) -> None:
        await super().cleanup()
        if not self._rate:
            self._call.recording = None  # no audio ever came: no file
        else:
            _pad_to(self._caller, len(self._bot))
            _pad_to(self._bot, len(self._caller))
            self._flush(len(self._caller))
            self._recordings.finish(self._path)

    # ------------------------------------------------------------------ tracks

    def _add(self, audio: bytes, rate: int, channels: int, *, caller: bool) -> None:
        if not audio or self._failed:
            return
        if not self._rate:
            self._rate = rate
        if channels != 1 or rate != self._rate:
            # rare: our transports run both sides at one rate
            audio = to_target(PcmAudio(audio, rate, channels), self._rate)
        mine, other = (self._caller, self._bot) if caller else (self._bot, self._caller)
        now = time.monotonic()
        last = self._caller_at if caller else self._bot_at
        if last is not None:
            gap = now - last - len(audio) / 2 / self._rate
            if gap > GAP_S:
                mine.extend(bytes(int(gap * self._rate) * 2))
        other_speaking = self._bot_speaking if caller else self._user_speaking
        if not other_speaking:
            _pad_to(other, len(mine))
            if caller:
                self._bot_at = now
            else:
                self._caller_at = now
        mine.extend(audio)
        if caller:
            self._caller_at = now
        else:
            self._bot_at = now
        skew = abs(len(self._caller) - len(self._bot))
        if skew > MAX_SKEW_S * self._rate * 2:
            _pad_to(self._caller, len(self._bot))
            _pad_to(self._bot, len(self._caller))
        ready = min(len(self._caller), len(self._bot))
        if ready >= FLUSH_S * self._rate * 2:
            self._flush(ready)

    def _flush(self, size: int) -> None:
        if size <= 0:
            return
        caller, bot = bytes(self._caller[:size]), bytes(self._bot[:size])
        del self._caller[:size], self._bot[:size]
        if not self._recordings.write(self._path, self._rate, caller, bot):
            self._failed = True
            message = f"recording {self._path} stopped: the disk is too far behind"
            logger.error(f"call {self._call.id}: {message}; the call goes on unrecorded")
            self._call.errors.append(
                {
                    "at": time.time(),
                    "processor": "recording",
                    "category": None,
                    "fatal": False,
                    "message": message,
                }
            )


def _pad_to(track: bytearray, size: int) -> None:
    if len(track) < size:
        track.extend(bytes(size - len(track)))
