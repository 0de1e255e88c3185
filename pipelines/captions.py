"""``voice-agent captions``: live captions in the browser, the STT path alone.

For captioning and contact-centre analytics nothing but the recognizer is needed: a Gradio
page streams the microphone, each chunk becomes 16 kHz mono PCM16, Silero VAD (from
Pipecat's wheel) cuts it into utterances, and each utterance goes to the realtime STT
endpoint of the profile (the local ASR server, Voxtral on vLLM, or SageMaker) through the very
STT service the voice agent uses. Interim captions show while a person speaks; a
final caption replaces them when the utterance ends. Under the captions the page shows the
last caption's delay from the end of the speech: the VAD's stop wait plus the STT's time from
the VAD stop to the final transcript, as this server measured them.

With translation on (``voice-agent captions --translate``, or ``translation.enabled`` in the
profile), each final caption also goes to the profile's OpenAI-compatible LLM
(:class:`agent.llm.translation.Translator`) and its translation streams in under it, marked
``→``: the source text beside its translation, in the order they were said.

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
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams

from agent.config import ConfigError, Settings, load_settings
from agent.llm.translation import TranslationError, Translator
from agent.stt.audio import StreamConverter
from agent.stt.client import RealtimeTranscriber, TranscriptEvent
from agent.stt.protocol import SAMPLE_RATE
from agent.stt.service import VoxtralRealtimeSTTService
from pipelines.services import stt_service, translator

INSTALL_HINT = "pip install 'voice-agent[captions]'"


@dataclass(eq=False)
class CaptionLine:
    """One final caption, and its translation as far as it has come."""

    text: str
    translation: str | None = None
    """``None``: not translated (translation off, or not begun)."""
    translated: bool = False
    """The translation is complete."""
    error: str | None = None
    """Why it could not be translated."""

    def render(self) -> list[str]:
        if self.error is not None:
            return [self.text, f"→ [not translated: {self.error}]"]
        if self.translation is None:
            return [self.text]
        return [self.text, f"→ {self.translation}{'' if self.translated else ' …'}"]


@dataclass
class CaptionBoard:
    """What the page shows: the finished lines, the line being spoken, the last delay."""

    lines: list[CaptionLine] = field(default_factory=list)
    interim: str = ""
    max_lines: int = 12
    last_timed: TranscriptEvent | None = None
    """The last final whose delay was measured."""

    @property
    def finals(self) -> list[str]:
        """The finished lines' text."""
        return [line.text for line in self.lines]

    def show(self, event: TranscriptEvent) -> CaptionLine | None:
        """Take one event; a final's new line is returned (to be translated)."""
        added = None
        if event.kind == "interim":
            self.interim = event.text  # the service sends the utterance's text so far
        elif event.kind == "final":
            text = " ".join(event.text.split()) or " ".join(self.interim.split())
            if text:
                added = CaptionLine(text)
                self.lines.append(added)
                del self.lines[: -self.max_lines]
            self.interim = ""
            if event.after_speech_s is not None:
                self.last_timed = event
        return added

    def render_delay(self) -> str:
        """``Caption delay: 640 ms after the end of speech (VAD wait 500 ms + STT 140 ms)``."""
        event = self.last_timed
        if event is None or event.vad_wait_s is None or event.stt_s is None:
            return "Caption delay: shown after the first caption"
        wait, stt = round(1000 * event.vad_wait_s), round(1000 * event.stt_s)
        return (
            f"Caption delay: {wait + stt} ms after the end of speech "
            f"(VAD wait {wait} ms + STT {stt} ms)"
        )

    def render(self) -> str:
        lines = [shown for line in self.lines for shown in line.render()]
        interim = " ".join(self.interim.split())
        if interim:
            lines.append(f"{interim} …")
        return "\n".join(lines)


class CaptionSession:
    """One listener: 16 kHz PCM16 in, captions on a :class:`CaptionBoard` out.

    It is the voice agent's own STT path (Silero VAD → :class:`VoxtralRealtimeSTTService`,
    with its pre-roll, reconnects and replay) run by a :class:`RealtimeTranscriber`. With a
    ``translator``, each final line is translated in a background task, one line at a time in
    the order they came; a line that fails shows why, and the next is tried afresh.
    """

    def __init__(
        self,
        *,
        service: VoxtralRealtimeSTTService,
        vad: VADAnalyzer,
        board: CaptionBoard | None = None,
        translator: Translator | None = None,
    ) -> None:
        self.board = board or CaptionBoard()
        self.error: str | None = None
        self._transcriber = RealtimeTranscriber(service, sample_rate=SAMPLE_RATE, vad_analyzer=vad)
        self._started = False
        self._translator = translator
        self._to_translate: asyncio.Queue[CaptionLine] = asyncio.Queue()
        self._translating: asyncio.Task[None] | None = None

    async def feed(self, pcm: bytes) -> None:
        """Take the next piece of 16 kHz mono PCM16 audio and update the board."""
        if not self._started:
            self._started = True
            await self._transcriber.__aenter__()
        await self._transcriber.feed(pcm)
        self._show_events()

    async def close(self, *, final_timeout_s: float = 5.0) -> None:
        """End the utterance in progress, wait briefly for its caption (and its translation),
        then disconnect."""
        if not self._started:
            return
        self._started = False
        with contextlib.suppress(TimeoutError):
            await self._transcriber.finish(timeout=final_timeout_s)
        self._show_events()
        await self._transcriber.__aexit__(None, None, None)
        if self._translating is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(final_timeout_s):
                    await self._to_translate.join()
            self._translating.cancel()
            await asyncio.gather(self._translating, return_exceptions=True)
            self._translating = None

    def _show_events(self) -> None:
        events = self._transcriber.events
        while not events.empty():
            event = events.get_nowait()
            if event.kind == "error":
                self.error = event.text  # the STT's error message, not speech
                logger.warning(f"captions: {self.error}")
            line = self.board.show(event)
            if line is not None and self._translator is not None:
                line.translation = ""
                self._to_translate.put_nowait(line)
                if self._translating is None:
                    self._translating = asyncio.create_task(self._translate_in_order())

    async def _translate_in_order(self) -> None:
        assert self._translator is not None
        while True:
            line = await self._to_translate.get()
            try:
                async for piece in self._translator.stream(line.text):
                    line.translation = (line.translation or "") + piece
                line.translated = True
            except TranslationError as exc:
                line.error = str(exc)
                logger.warning(f"captions: a line was not translated: {exc}")
            finally:
                self._to_translate.task_done()


def to_stt_pcm(sample_rate: int, samples: np.ndarray, converter: StreamConverter) -> bytes:
    """A microphone chunk as Gradio gives it (int16 or float, mono or [n, channels]) →
    16 kHz mono PCM16 bytes."""
    if samples.dtype.kind == "f":
        samples = np.clip(samples, -1.0, 1.0) * 32767.0
    samples = samples.astype("<i2", copy=False)
    channels = 1 if samples.ndim == 1 else int(samples.shape[1])
    return converter.convert(samples.tobytes(), sample_rate, channels)


def session_factory(settings: Settings, *, translate: bool = False) -> Callable[[], CaptionSession]:
    """Builds a :class:`CaptionSession` per browser tab for the configured STT endpoint (and,
    with ``translate``, the configured LLM as translator)."""

    def make() -> CaptionSession:
        from agent.fastpath.shared_silero import SharedSileroVADAnalyzer

        return CaptionSession(
            service=stt_service(settings.stt),
            vad=SharedSileroVADAnalyzer(params=VADParams(stop_secs=0.5)),
            translator=translator(settings.translation, settings.llm) if translate else None,
        )

    return make


def import_gradio() -> Any:
    """Gradio, or :class:`ImportError` saying how to install the extra."""
    try:
        import gradio
    except ImportError as exc:
        raise ImportError(f"live captions need Gradio, an optional extra: {INSTALL_HINT}") from exc
    return gradio


class CaptionHandlers:
    """The page's two callbacks, kept free of Gradio so they can be tested without it.

    Each returns the caption text and the delay line to show (``None``: leave the page as it
    is) and the new per-tab state.
    """

    def __init__(self, make_session: Callable[[], CaptionSession]) -> None:
        self._make_session = make_session

    async def on_audio(
        self, chunk: tuple[int, np.ndarray] | None, state: dict[str, Any]
    ) -> tuple[str | None, str | None, dict[str, Any]]:
        if chunk is None:
            return None, None, state
        if "session" not in state:
            state["session"] = self._make_session()
            state["converter"] = StreamConverter()
        session: CaptionSession = state["session"]
        sample_rate, samples = chunk
        await session.feed(to_stt_pcm(sample_rate, samples, state["converter"]))
        text = session.board.render()
        if session.error:
            text += f"\n[{session.error}]"
        return text, session.board.render_delay(), state

    async def on_stop(self, state: dict[str, Any]) -> tuple[str | None, str | None, dict[str, Any]]:
        session: CaptionSession | None = state.get("session")
        if session is None:
            return None, None, state
        await session.close()
        return session.board.render(), session.board.render_delay(), {}


def build_app(
    settings: Settings, gr: Any, *, translate: bool = False
) -> Any:  # pragma: no cover - needs gradio
    """The Gradio page: microphone in, captions (and their translations) out."""
    handlers = CaptionHandlers(session_factory(settings, translate=translate))

    def shown(value: str | None) -> Any:
        return gr.skip() if value is None else value

    async def on_audio(chunk: tuple[int, np.ndarray] | None, state: dict[str, Any]) -> Any:
        text, delay, state = await handlers.on_audio(chunk, state)
        return shown(text), shown(delay), state

    async def on_stop(state: dict[str, Any]) -> Any:
        text, delay, state = await handlers.on_stop(state)
        return shown(text), shown(delay), state

    with gr.Blocks(title="Live captions") as app:
        gr.Markdown("# Live captions\nPress record and speak; captions appear as you talk.")
        microphone = gr.Audio(sources=["microphone"], streaming=True, type="numpy")
        captions = gr.Textbox(label="Captions", lines=12, interactive=False)
        delay = gr.Markdown()
        state = gr.State({})
        microphone.stream(
            on_audio,
            inputs=[microphone, state],
            outputs=[captions, delay, state],
            stream_every=0.1,
        )
        microphone.stop_recording(on_stop, inputs=[state], outputs=[captions, delay, state])
    return app


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent captions",
        description="Live captions from the microphone, in the browser (Gradio).",
    )
    parser.add_argument("--profile", help="settings profile whose [stt] endpoint to use")
    parser.add_argument("--host", default="127.0.0.1", help="address for the page")
    parser.add_argument("--port", type=int, default=7861, help="port for the page")
    parser.add_argument(
        "--translate",
        action="store_true",
        help="translate each caption with the profile's LLM ([translation] languages; also "
        "on with translation.enabled)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(args.profile)
    except ConfigError as exc:
        print(f"voice-agent captions: {exc}", file=sys.stderr)
        return 2
    translate = args.translate or settings.translation.enabled
    if translate and not settings.llm.base_url:
        print(
            "voice-agent captions: --translate needs an LLM to translate with: set llm.base_url "
            "and llm.model (VOICE_AGENT_LLM__BASE_URL, VOICE_AGENT_LLM__MODEL)",
            file=sys.stderr,
        )
        return 2
    try:
        gr = import_gradio()
    except ImportError as exc:
        print(f"voice-agent captions: {exc}", file=sys.stderr)
        return 2
    app = build_app(settings, gr, translate=translate)  # pragma: no cover - needs gradio
    app.launch(server_name=args.host, server_port=args.port)  # pragma: no cover
    return 0  # pragma: no cover
