"""``voice-agent captions``: live captions in the browser, the STT path alone.

For captioning and contact-centre analytics nothing but the recognizer is needed: a Gradio
page streams the microphone, each chunk becomes 16 kHz mono PCM16, Silero VAD (from
Pipecat's wheel) cuts it into utterances, and each utterance goes to the realtime STT
endpoint of the profile (``stt.url``: the local ASR server, or Voxtral on vLLM) over the same
channel and protocol as the voice agent. Interim captions show while a person speaks; a
final caption replaces them when the utterance ends.

Gradio is an optional extra (``pip install 'voice-agent[captions]'``) and is imported only
when the command runs. Everything below :func:`main` except :func:`build_app` works without
it (and is what the tests exercise).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams, VADState

from agent.audio import StreamConverter
from agent.config import ConfigError, STTSettings, load_settings
from agent.stt.channels import (
    ChannelError,
    ChannelFactory,
    RealtimeChannel,
    websocket_channel_factory,
)
from agent.stt.protocol import (
    SAMPLE_RATE,
    Commit,
    ErrorEvent,
    SessionUpdate,
    TranscriptionDelta,
    TranscriptionDone,
    encode_pcm_append,
    parse_server_event,
)
from agent.stt.turn import PreRoll

INSTALL_HINT = "pip install 'voice-agent[captions]'"


@dataclass
class CaptionBoard:
    """What the page shows: the finished lines and the line being spoken."""

    finals: list[str] = field(default_factory=list)
    interim: str = ""
    max_lines: int = 12

    def delta(self, text: str) -> None:
        self.interim += text

    def done(self, text: str) -> None:
        line = " ".join(text.split()) or " ".join(self.interim.split())
        if line:
            self.finals.append(line)
            del self.finals[: -self.max_lines]
        self.interim = ""

    def render(self) -> str:
        lines = list(self.finals)
        interim = " ".join(self.interim.split())
        if interim:
            lines.append(f"{interim} …")
        return "\n".join(lines)


class CaptionSession:
    """One listener: VAD-cut utterances from 16 kHz PCM16 to captions on a :class:`CaptionBoard`.

    Args:
        channel_factory: Opens the realtime channel (opened on the first audio).
        model: The served model name sent in ``session.update``.
        vad: A VAD analyzer; its sample rate is set to 16 kHz here.
        preroll_s: Audio from before the VAD fired, sent at the start of each utterance.
    """

    def __init__(
        self,
        *,
        channel_factory: ChannelFactory,
        model: str,
        vad: VADAnalyzer,
        preroll_s: float = 0.4,
        board: CaptionBoard | None = None,
    ) -> None:
        self.board = board or CaptionBoard()
        self._channel_factory = channel_factory
        self._model = model
        self._vad = vad
        self._vad.set_sample_rate(SAMPLE_RATE)
        self._preroll = PreRoll(preroll_s)
        self._channel: RealtimeChannel | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._speaking = False
        self._final_pending = False
        self._done = asyncio.Event()
        """Set when a final caption (or the end of the channel) arrives."""
        self.error: str | None = None

    async def feed(self, pcm: bytes) -> None:
        """Take the next piece of 16 kHz mono PCM16 audio."""
        state = await self._vad.analyze_audio(pcm)
        if not self._speaking:
            self._preroll.hear(pcm)
            if state == VADState.SPEAKING:
                await self._start_utterance()
        else:
            await self._send(encode_pcm_append(pcm))
            if state == VADState.QUIET:
                await self.end_utterance()

    async def end_utterance(self) -> None:
        """Ask for the final caption of the utterance in progress (if any)."""
        if self._speaking:
            self._speaking = False
            self._done.clear()
            self._final_pending = True
            await self._send(Commit(final=True).to_json())

    async def close(self) -> None:
        """Finish the utterance in progress, wait briefly for its caption, close the channel."""
        await self.end_utterance()
        await self._wait_for_final()
        if self._receiver is not None:
            self._receiver.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._receiver
            self._receiver = None
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def _wait_for_final(self, timeout_s: float = 5.0) -> None:
        """One generation at a time: wait for the last final before anything new."""
        if self._final_pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), timeout=timeout_s)
            self._final_pending = False

    async def _start_utterance(self) -> None:
        await self._connect()
        await self._wait_for_final()
        self._speaking = True
        await self._send(Commit(final=False).to_json())
        await self._send(encode_pcm_append(self._preroll.take()))

    async def _connect(self) -> None:
        if self._channel is not None:
            return
        self._channel = await self._channel_factory()
        await self._channel.send(SessionUpdate(model=self._model).to_json())
        self._receiver = asyncio.create_task(self._receive(self._channel), name="captions-recv")

    async def _send(self, text: str) -> None:
        if self._channel is not None:
            await self._channel.send(text)

    async def _receive(self, channel: RealtimeChannel) -> None:
        try:
            while True:
                event = parse_server_event(await channel.receive())
                if isinstance(event, TranscriptionDelta):
                    self.board.delta(event.delta)
                elif isinstance(event, TranscriptionDone):
                    self.board.done(event.text)
                    self._done.set()
                elif isinstance(event, ErrorEvent):
                    self.error = f"{event.code or 'error'}: {event.error}"
                    logger.warning(f"STT server error: {self.error}")
        except ChannelError as exc:
            self.error = f"the STT connection ended: {exc}"
            self._done.set()


def to_stt_pcm(sample_rate: int, samples: np.ndarray, converter: StreamConverter) -> bytes:
    """A microphone chunk as Gradio gives it (int16 or float, mono or [n, channels]) →
    16 kHz mono PCM16 bytes."""
    if samples.dtype.kind == "f":
        samples = np.clip(samples, -1.0, 1.0) * 32767.0
    samples = samples.astype("<i2", copy=False)
    channels = 1 if samples.ndim == 1 else int(samples.shape[1])
    return converter.convert(samples.tobytes(), sample_rate, channels)


def channel_factory(settings: STTSettings) -> ChannelFactory:
    """The realtime channel of the profile: vLLM's WebSocket, or the SageMaker stream."""
    if settings.transport == "sagemaker":
        from agent.stt.sagemaker import sagemaker_channel_factory

        return sagemaker_channel_factory(settings.sagemaker)
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else None
    return websocket_channel_factory(settings.url, headers=headers)


def session_factory(settings: STTSettings) -> Callable[[], CaptionSession]:
    """Builds a :class:`CaptionSession` per browser tab for the configured STT endpoint."""

    def make() -> CaptionSession:
        from pipecat.audio.vad.silero import SileroVADAnalyzer

        return CaptionSession(
            channel_factory=channel_factory(settings),
            model=settings.model,
            vad=SileroVADAnalyzer(params=VADParams(stop_secs=0.5)),
            preroll_s=settings.preroll_s,
        )

    return make


def import_gradio() -> Any:
    """Gradio, or :class:`ImportError` saying how to install the extra."""
    try:
        import gradio
    except ImportError as exc:
        raise ImportError(f"live captions need Gradio, an optional extra: {INSTALL_HINT}") from exc
    return gradio


def build_app(settings: STTSettings, gr: Any) -> Any:  # pragma: no cover - needs gradio
    """The Gradio page: microphone in, captions out."""
    make_session = session_factory(settings)

    async def on_audio(chunk: tuple[int, np.ndarray] | None, state: dict[str, Any]) -> Any:
        if chunk is None:
            return gr.skip(), state
        if "session" not in state:
            state["session"] = make_session()
            state["converter"] = StreamConverter()
        session: CaptionSession = state["session"]
        sample_rate, samples = chunk
        await session.feed(to_stt_pcm(sample_rate, samples, state["converter"]))
        text = session.board.render()
        if session.error:
            text += f"\n[{session.error}]"
        return text, state

    async def on_stop(state: dict[str, Any]) -> Any:
        session: CaptionSession | None = state.get("session")
        if session is None:
            return gr.skip(), state
        await session.close()
        return session.board.render(), {}

    with gr.Blocks(title="Live captions") as app:
        gr.Markdown("# Live captions\nPress record and speak; captions appear as you talk.")
        microphone = gr.Audio(sources=["microphone"], streaming=True, type="numpy")
        captions = gr.Textbox(label="Captions", lines=12, interactive=False)
        state = gr.State({})
        microphone.stream(
            on_audio, inputs=[microphone, state], outputs=[captions, state], stream_every=0.1
        )
        microphone.stop_recording(on_stop, inputs=[state], outputs=[captions, state])
    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent captions",
        description="Live captions from the microphone, in the browser (Gradio).",
    )
    parser.add_argument("--profile", help="settings profile whose [stt] endpoint to use")
    parser.add_argument("--host", default="127.0.0.1", help="address for the page")
    parser.add_argument("--port", type=int, default=7861, help="port for the page")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        gr = import_gradio()
    except ImportError as exc:
        print(f"voice-agent captions: {exc}", file=sys.stderr)
        return 2
    try:
        settings = load_settings(args.profile)
    except ConfigError as exc:
        print(f"voice-agent captions: {exc}", file=sys.stderr)
        return 2
    app = build_app(settings.stt, gr)  # pragma: no cover - needs gradio
    app.launch(server_name=args.host, server_port=args.port)  # pragma: no cover
    return 0  # pragma: no cover
