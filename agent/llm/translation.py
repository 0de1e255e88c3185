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
    EagerEndOfTurnCancelFrame,
    EagerTranscriptionFrame,
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


class _Head:
    """A translation begun early, on the stable interim transcript at the VAD stop: its
    captions go out as it streams; its pieces wait here until the final transcript confirms
    them (and are then spoken) or is different (and they are dropped)."""

    def __init__(self, id: int, source: str) -> None:
        self.id = id
        self.source = source
        self.pieces: asyncio.Queue[str | TranslationError | None] = asyncio.Queue()
        """The streamed pieces, then ``None`` (done) or the error."""
        self.task: asyncio.Task[None] | None = None

    async def replay(self) -> AsyncIterator[str]:
        while (piece := await self.pieces.get()) is not None:
            if isinstance(piece, TranslationError):
                raise piece
            yield piece


def _same_words(a: str, b: str) -> bool:
    """Whether two transcripts say the same words (case and punctuation aside)."""

    def words(text: str) -> list[str]:
        return "".join(c if c.isalnum() else " " for c in text.lower()).split()

    return words(a) == words(b)


class TranslationProcessor(FrameProcessor):
    """Final transcripts in; captions, and in interpreter mode the text to speak, out.

    Transcripts pass on downstream unchanged (the call record keeps what was said); the
    translation work runs in a task of its own, so audio and transcripts keep flowing while
    the model answers.

    With an STT that sends its stable interim transcript at the VAD stop
    (``EagerTranscriptionFrame``: ``translation.interim``), the translation starts on it at
    once and its captions stream while the final transcript is still being decoded. The
    final confirms it when it says the same words (nothing is asked twice; the speech is
    released) and replaces it otherwise (the captions of that ``id`` start over from the
    final's translation, and nothing of the early one is spoken). The speaker going on
    (``EagerEndOfTurnCancelFrame``) drops it the same way.
    """

    def __init__(
        self,
        translator: Translator,
        *,
        speak: bool,
        about: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        """``about``: more fields for every message this stage sends (an interpreted call's
        ``party``: whose words a caption translates)."""
        super().__init__(**kwargs)
        self._translator = translator
        self._speak = speak
        self._about = dict(about or {})
        self._ids = itertools.count(1)
        self._pending: asyncio.Queue[tuple[int, str, _Head | None]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None
        self._head: _Head | None = None
        self._reserved: int | None = None
        """The id of an utterance whose early translation was dropped: its final keeps it."""
        self._early: set[asyncio.Task[None]] = set()

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
        elif isinstance(frame, EagerTranscriptionFrame):
            await self._begin_early(" ".join(frame.text.split()))
        elif isinstance(frame, EagerEndOfTurnCancelFrame):
            await self._drop_early()
        elif isinstance(frame, TranscriptionFrame) and direction is FrameDirection.DOWNSTREAM:
            text = " ".join(frame.text.split())
            head, self._head = self._head, None
            if head is not None and not (text and _same_words(text, head.source)):
                self._head = head
                await self._drop_early()
                head = None
            if text:
                self._pending.put_nowait((head.id if head else self._next_id(), text, head))
        await self.push_frame(frame, direction)

    def _next_id(self) -> int:
        id, self._reserved = self._reserved, None
        return id if id is not None else next(self._ids)

    async def _begin_early(self, text: str) -> None:
        await self._drop_early()
        if not text:
            return
        head = self._head = _Head(self._next_id(), text)
        head.task = self.create_task(self._stream_early(head), f"translation-early-{head.id}")
        self._early.add(head.task)
        head.task.add_done_callback(self._early.discard)

    async def _drop_early(self) -> None:
        head, self._head = self._head, None
        if head is not None:
            self._reserved = head.id
            if head.task is not None:
                await self.cancel_task(head.task)

    async def _stream_early(self, head: _Head) -> None:
        spec = self._translator.spec
        text = ""
        try:
            async for piece in self._translator.stream(head.source):
                text += piece
                head.pieces.put_nowait(piece)
                await self._send(
                    caption(spec, id=head.id, source=head.source, text=text, final=False)
                )
        except TranslationError as exc:
            head.pieces.put_nowait(exc)
            return
        head.pieces.put_nowait(None)

    async def _stop(self) -> None:
        await self._drop_early()
        for task in list(self._early):
            await self.cancel_task(task)
        if self._worker is not None:
            await self.cancel_task(self._worker)
            self._worker = None

    async def _translate_in_order(self) -> None:
        while True:
            id, source, head = await self._pending.get()
            try:
                if head is None:
                    await self._translate(id, source, self._translator.stream(source))
                else:  # its captions went out as it streamed
                    await self._translate(id, source, head.replay(), live_captions=False)
            finally:
                self._pending.task_done()

    async def _translate(
        self, id: int, source: str, pieces: AsyncIterator[str], *, live_captions: bool = True
    ) -> None:
        spec = self._translator.spec
        text = ""
        speaking = False
        try:
            async for piece in pieces:
                if self._speak and not speaking:
                    speaking = True
                    await self.push_frame(LLMFullResponseStartFrame())
                text += piece
                if live_captions:
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
        await self.push_frame(RTVIServerMessageFrame(data={**data, **self._about}))
