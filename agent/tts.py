"""Speech synthesis for the pipeline (which one a call gets: :mod:`pipelines.services`).

Two kinds, both plain HTTP so no synthesis engine lives in our process:

- ``piper`` (offline default): Piper's own HTTP server, started by ``voice-agent serve`` as a
  child process (:mod:`agent.local.piper_server`). piper-tts is GPL-3.0, so it runs out of
  process and is never imported here. We don't use Pipecat's ``PiperHttpTTSService`` either:
  its module imports ``piper`` at load time, which would pull the GPL library in.
  ``POST {base_url}/synthesize`` answers a WAV at the voice's rate (22.05 kHz).
- ``openai``: any OpenAI-compatible ``POST {base_url}/audio/speech`` (Kokoro-FastAPI,
  vLLM-Omni, OpenAI) asked for raw ``pcm`` at ``tts.sample_rate``. Pipecat's
  ``OpenAITTSService`` only accepts OpenAI's own voice names, so Kokoro voices such as
  ``af_heart`` need this small client.

The services emit audio at the engine's native rate; the output transport resamples it to
its own rate as usual, so there is one resampling step, not two.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import aiohttp
from pipecat.frames.frames import ErrorFrame, Frame, StartFrame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings as PipecatTTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService

from agent.first_clause import FirstClauseTextAggregator, RealTimeFactor
from agent.lead_in import LeadInTrimmer
from agent.local.piper_server import SYNTHESIZE_PATH, PiperUnavailable, voice_name
from agent.stt.channels import bearer_auth

_READ_CHUNK_BYTES = 4096


class HTTPSpeechService(TTSService):
    """A TTS service that POSTs each sentence and streams the audio back.

    Owns its ``aiohttp`` session: opened in :meth:`start`, closed in :meth:`cleanup`, so a
    call that ends however it ends leaves no socket behind.
    """

    def __init__(
        self,
        *,
        url: str,
        voice: str | None,
        headers: dict[str, str] | None = None,
        request_timeout_s: float = 30.0,
        trim_lead_in: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            settings=PipecatTTSSettings(model=None, voice=voice, language=None),
            **kwargs,
        )
        self._url = url
        self._headers = headers or {}
        self._timeout = aiohttp.ClientTimeout(total=request_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._trim_lead_in = trim_lead_in
        self._answer_with_lead_in_cut: str | None = None

    def can_generate_metrics(self) -> bool:
        return True

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)

    async def cleanup(self) -> None:
        await super().cleanup()
        if self._session is not None:
            await self._session.close()
            self._session = None

    def request_body(self, text: str) -> dict[str, Any]:
        """The JSON body for one sentence; subclasses say what their server expects."""
        raise NotImplementedError

    def audio_format(self) -> dict[str, Any]:
        """Keyword arguments for ``_stream_audio_frames_from_iterator`` (WAV or raw PCM)."""
        raise NotImplementedError

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, None]:
        if self._session is None:
            yield ErrorFrame(error=f"{self} used before setup; it has no HTTP session")
            return
        try:
            async with self._session.post(
                self._url, json=self.request_body(text), headers=self._headers
            ) as response:
                if response.status != 200:
                    detail = (await response.text())[:300]
                    yield ErrorFrame(
                        error=f"TTS server {self._url} answered HTTP {response.status}: {detail}"
                    )
                    return
                await self.start_tts_usage_metrics(text)
                chunks = _iter_chunks(response)
                lead_in = self._lead_in_trimmer(context_id)
                async for frame in self._stream_audio_frames_from_iterator(
                    chunks, context_id=context_id, **self.audio_format()
                ):
                    if lead_in is not None and isinstance(frame, TTSAudioRawFrame):
                        _cut_lead_in(frame, lead_in)
                        if not frame.audio:
                            continue
                    await self.stop_ttfb_metrics()
                    yield frame
        except (aiohttp.ClientError, TimeoutError) as exc:
            yield ErrorFrame(
                error=f"TTS server {self._url} failed: {exc or type(exc).__name__}. "
                "Is it running? (voice-agent serve starts Piper in the default profile)"
            )
        finally:
            await self.stop_ttfb_metrics()

    def _lead_in_trimmer(self, context_id: str) -> LeadInTrimmer | None:
        """A trimmer for an answer's first request (Pipecat keeps one context id per answer);
        None for its later sentences, whose quiet is the pause between them."""
        if not self._trim_lead_in or context_id == self._answer_with_lead_in_cut:
            return None
        self._answer_with_lead_in_cut = context_id
        return LeadInTrimmer()


def _cut_lead_in(frame: TTSAudioRawFrame, lead_in: LeadInTrimmer) -> None:
    frame.audio = lead_in.cut(frame.audio, frame.sample_rate, frame.num_channels)
    frame.num_frames = len(frame.audio) // (2 * frame.num_channels)


async def _iter_chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    async for chunk in response.content.iter_chunked(_READ_CHUNK_BYTES):
        yield chunk


class PiperHTTPTTSService(HTTPSpeechService):
    """Piper's HTTP server (``python -m piper.http_server``), out of process.

    Piper answers a whole WAV per request, so the first request's length is the first
    audio's delay: each answer's first clause is sent on its own
    (:class:`agent.first_clause.FirstClauseTextAggregator`), the rest as whole sentences.
    """

    def __init__(
        self,
        *,
        base_url: str,
        voice: str | None = None,
        first_clause_min_words: int | None = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(url=base_url.rstrip("/") + SYNTHESIZE_PATH, voice=voice, **kwargs)
        self.real_time_factor = RealTimeFactor()
        if first_clause_min_words is not None and not self._is_streaming_tokens:
            # Pipecat 1.14's TTSService takes no aggregator argument; this is the attribute
            # it aggregates with (tests/pipelines/test_tts.py notices if that changes).
            self._text_aggregator = FirstClauseTextAggregator(
                min_words=first_clause_min_words,
                split_allowed=self.real_time_factor.fast_enough,
                aggregation_type=TextAggregationMode.SENTENCE,
            )

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame, None]:
        started = time.monotonic()
        audio_s = 0.0
        async for frame in super().run_tts(text, context_id):
            if isinstance(frame, TTSAudioRawFrame):
                audio_s += len(frame.audio) / (2 * frame.sample_rate * frame.num_channels)
            yield frame
        # Piper answers once the whole WAV is made: the time to its end is the synthesis.
        self.real_time_factor.add(time.monotonic() - started, audio_s)

    def request_body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text}
        if self._settings.voice:
            body["voice"] = self._settings.voice
        return body

    def audio_format(self) -> dict[str, Any]:
        # A WAV file; its header tells the rate.
        return {"strip_wav_header": True}


class OpenAISpeechService(HTTPSpeechService):
    """An OpenAI-compatible ``/v1/audio/speech`` endpoint, raw PCM16 at ``sample_rate``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        voice: str,
        api_key: str,
        sample_rate: int,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            url=base_url.rstrip("/") + "/audio/speech",
            voice=voice,
            headers=bearer_auth(api_key or "not-needed"),
            sample_rate=sample_rate,
            **kwargs,
        )
        self._model = model
        self._source_rate = sample_rate

    def request_body(self, text: str) -> dict[str, Any]:
        return {
            "model": self._model,
            "voice": self._settings.voice,
            "input": text,
            "response_format": "pcm",
        }

    def audio_format(self) -> dict[str, Any]:
        return {"in_sample_rate": self._source_rate}


def packaged_piper_voice() -> str | None:
    """The packaged voice's id, or None (the server's default voice) if it isn't installed."""
    try:
        return voice_name()
    except PiperUnavailable:
        return None
