"""Translation by an OpenAI-compatible chat model: one utterance in, its translation streamed out.

:class:`Translator` is the plain client (the live captions page uses it as it is);
:class:`TranslationProcessor` is the Pipecat stage a translation call runs
(:mod:`pipelines.translation`). Each final transcript is one chat request, with no conversation
around it: a translation must say what was said, not answer it, and a request that carries
only the utterance keeps the model's first token as early as it can be.

What a translation stage sends out, per utterance (``id`` counts from 1 in a call):

- a caption, as an ``RTVIServerMessageFrame`` whose ``data`` is ``{"type": "translation",
  "id", "source", "text", "final", "source_language", "target_language"}``: the source text
  beside its translation so far, once per streamed piece, the last with ``final: true``. A
  client that speaks RTVI (the playground) gets it as a ``server-message``.
- in interpreter mode (``speak``), the translation as ``LLMTextFrame`` s between
  ``LLMFullResponseStartFrame`` and ``LLMFullResponseEndFrame``, so the TTS after it speaks it
  into the call, sentence by sentence as it streams.
- when the model fails (down, an HTTP error, a stream cut off), an ``ErrorFrame`` upstream
  (non-fatal) and a ``{"type": "translation-error", "id", "error"}`` message: the call goes on
  and the next utterance is tried afresh. An utterance with no words is not sent.

Utterances are translated one at a time in the order they were said, so captions and speech
never overtake one another; the caller is never interrupted by the interpreter, nor the
interpreter by the caller.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

import httpx
import openai
from loguru import logger
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    StartFrame,
    TranscriptionFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame

TRANSLATION: Final = "translation"
"""``data.type`` of a caption message."""
TRANSLATION_ERROR: Final = "translation-error"
"""``data.type`` of the message sent when an utterance could not be translated."""


class TranslationError(RuntimeError):
    """The model could not translate an utterance; the message says what to check."""


@dataclass(frozen=True, slots=True)
class TranslationSpec:
    """What to translate from and into, and how to ask for it."""

    source_language: str
    target_language: str
    instruction: str
    """The system message; ``{source}`` and ``{target}`` become the two languages."""

    def messages(self, text: str) -> list[ChatCompletionMessageParam]:
        """The chat request's messages for one utterance."""
        system = self.instruction.format(source=self.source_language, target=self.target_language)
        return [{"role": "system", "content": system}, {"role": "user", "content": text}]


class Translator:
    """Streams translations from an OpenAI-compatible chat server.

    Args:
        client: The server's client (shared per server: :mod:`agent.llm.clients`).
        model: The served model name.
        spec: The languages and the instruction.
        timeout_s: Limit for the whole answer of one utterance.
    """

    def __init__(
        self,
        client: AsyncOpenAI,
        *,
        model: str,
        spec: TranslationSpec,
        temperature: float = 0.0,
        max_tokens: int = 200,
        timeout_s: float = 10.0,
    ) -> None:
        # No retries: a retried request would arrive long after the speech it translates.
        self._client = client.with_options(max_retries=0)
        self.model = model
        self.spec = spec
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._timeout_s = timeout_s

    async def stream(self, text: str) -> AsyncIterator[str]:
        """The translation of ``text``, piece by piece as the model streams it.

        Raises:
            TranslationError: the server is unreachable, refused the request, timed out or
                broke off the answer (never quoting ``text``: callers' words stay out of logs).
        """
        where = f"the LLM at {self._client.base_url} (model {self.model!r})"
        answering = False  # the response has begun: a connection error now is a cut-off
        try:
            async with asyncio.timeout(self._timeout_s):
                stream = await self._client.chat.completions.create(
                    model=self.model,
                    messages=self.spec.messages(text),
                    stream=True,
                    temperature=self._temperature,
                    max_tokens=self._max_tokens,
                )
                answering = True
                async for chunk in stream:
                    for choice in chunk.choices:
                        if choice.delta.content:
                            yield choice.delta.content
        except TimeoutError:
            raise TranslationError(
                f"{where} did not finish a translation within {self._timeout_s} s "
                "(raise translation.timeout_s, or use a faster model)"
            ) from None
        except openai.APIConnectionError as exc:
            if answering:
                raise TranslationError(
                    f"{where} broke off the translation mid-answer: {exc.__cause__ or exc} "
                    "(see the LLM server's log)"
                ) from None
            raise TranslationError(
                f"cannot reach {where}: {exc} (is llm.base_url right and the server up?)"
            ) from None
        except openai.APIStatusError as exc:
            raise TranslationError(
                f"{where} refused the translation: HTTP {exc.status_code} "
                "(check llm.model, llm.api_key and the server's log)"
            ) from None
        except (openai.OpenAIError, httpx.HTTPError) as exc:
            raise TranslationError(
                f"{where} broke off the translation: {type(exc).__name__} (see the LLM "
                "server's log)"
            ) from None


def caption(
    spec: TranslationSpec, *, id: int, source: str, text: str, final: bool
) -> dict[str, Any]:
    """A caption message's ``data``: the source beside its translation so far."""
    return {
        "type": TRANSLATION,
        "id": id,
        "source": source,
        "text": text,
        "final": final,
        "source_language": spec.source_language,
        "target_language": spec.target_language,
    }


class TranslationProcessor(FrameProcessor):
    """Final transcripts in; captions, and in interpreter mode the text to speak, out.

    Transcripts pass on downstream unchanged (the call record keeps what was said); the
    translation work runs in a task of its own, so audio and transcripts keep flowing while
    the model answers.
    """

    def __init__(self, translator: Translator, *, speak: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._translator = translator
        self._speak = speak
        self._ids = itertools.count(1)
        self._pending: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, StartFrame):
            await self.push_frame(frame, direction)
            if self._worker is None:
                self._worker = self.create_task(self._translate_in_order(), "translation")
            return
        if isinstance(frame, EndFrame):
            await self._pending.join()  # a call that ends in order still hears its last words
            await self._stop()
        elif isinstance(frame, CancelFrame):
            await self._stop()
        elif isinstance(frame, TranscriptionFrame) and direction is FrameDirection.DOWNSTREAM:
            text = " ".join(frame.text.split())
            if text:
                self._pending.put_nowait((next(self._ids), text))
        await self.push_frame(frame, direction)

    async def _stop(self) -> None:
        if self._worker is not None:
            await self.cancel_task(self._worker)
            self._worker = None

    async def _translate_in_order(self) -> None:
        while True:
            id, source = await self._pending.get()
            try:
                await self._translate(id, source)
            finally:
                self._pending.task_done()

    async def _translate(self, id: int, source: str) -> None:
        spec = self._translator.spec
        text = ""
        speaking = False
        try:
            async for piece in self._translator.stream(source):
                if self._speak and not speaking:
                    speaking = True
                    await self.push_frame(LLMFullResponseStartFrame())
                text += piece
                await self._send(caption(spec, id=id, source=source, text=text, final=False))
                if self._speak:
                    await self.push_frame(LLMTextFrame(piece))
        except TranslationError as exc:
            logger.warning(f"{self}: utterance {id}: {exc}")
            await self.push_error(f"{self}: utterance {id} was not translated: {exc}")
            await self._send({"type": TRANSLATION_ERROR, "id": id, "error": str(exc)})
            return
        finally:
            if speaking:
                await self.push_frame(LLMFullResponseEndFrame())
        await self._send(caption(spec, id=id, source=source, text=text.strip(), final=True))

    async def _send(self, data: dict[str, Any]) -> None:
        await self.push_frame(RTVIServerMessageFrame(data=data))
