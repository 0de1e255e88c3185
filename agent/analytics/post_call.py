"""After an analytics call: a summary, the caller's reason for calling and each speaker's
sentiment, from the configured OpenAI-compatible LLM, off the call's path.

An ended call is put on a queue (never awaited by the stream); a few workers take calls from
it, ask the model once per call with the redacted, diarized transcript, and retry a failed or
unparsable answer with backoff (``analytics.summary_attempts``). The result lands on the
call's record (``analysis``, with the model and the prompt version that produced it), is
pushed to anyone watching the call's page, and, with ``records.directory``, the record is
appended again: the last line of a call id is its complete record. A call whose summary never
came has ``analysis.error`` instead.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from typing import Any

from loguru import logger

from agent.calls import Call
from agent.config import AnalyticsSettings, LLMSettings
from agent.llm.clients import shared_openai_client

PROMPT = """You review a customer-service phone call. The transcript lists each utterance as
[start seconds] SPEAKER: text. The speakers are "caller" (the customer) and "agent" (the
person who answered). Numbers and addresses may be redacted as [card number], [email] etc.

Answer with one JSON object and nothing else:
{"summary": "<two or three sentences>",
 "reason": "<why the caller called, one short phrase>",
 "sentiment": {"caller": "positive|neutral|negative", "agent": "positive|neutral|negative"}}"""

BACKOFF_S = 1.0
"""The first retry waits this long, each next one twice as long."""

QUEUE_LIMIT = 10_000
"""Calls waiting for a summary; beyond it the newest is not summarized (and says so)."""

_SENTIMENTS = {"positive", "neutral", "negative"}


def transcript_text(utterances: list[dict[str, Any]]) -> str:
    return "\n".join(f"[{u['start_s']:.1f}] {u['speaker']}: {u['text']}" for u in utterances)


def parse_analysis(content: str) -> dict[str, Any]:
    """The model's JSON answer, checked; ``ValueError`` says what is wrong with it."""
    match = re.search(r"\{.*\}", content, re.DOTALL)
    if match is None:
        raise ValueError("the answer holds no JSON object")
    data = json.loads(match.group())
    summary, reason = data.get("summary"), data.get("reason")
    sentiment = data.get("sentiment")
    if not isinstance(summary, str) or not isinstance(reason, str):
        raise ValueError("the answer lacks 'summary' or 'reason' text")
    if not isinstance(sentiment, dict):
        raise ValueError("the answer lacks a 'sentiment' object")
    per_speaker = {
        speaker: str(sentiment.get(speaker, "")).lower() for speaker in ("caller", "agent")
    }
    for speaker, value in per_speaker.items():
        if value not in _SENTIMENTS:
            raise ValueError(f"sentiment of the {speaker} is {value!r}, not one of {_SENTIMENTS}")
    return {"summary": summary.strip(), "reason": reason.strip(), "sentiment": per_speaker}


class PostCallAnalysis:
    """The queue and its workers (started on first use, stopped by :meth:`close`)."""

    def __init__(
        self,
        llm: LLMSettings,
        analytics: AnalyticsSettings,
        *,
        on_done: Callable[[Call], None] | None = None,
        backoff_s: float = BACKOFF_S,
    ) -> None:
        self._llm = llm
        self._settings = analytics
        self._on_done = on_done
        self._backoff_s = backoff_s
        self._queue: asyncio.Queue[Call] | None = None
        self._workers: list[asyncio.Task[None]] = []

    @property
    def pending(self) -> int:
        return 0 if self._queue is None else self._queue.qsize()

    def submit(self, call: Call) -> None:
        """Queue an ended call (a call with nothing said gets no summary)."""
        if not call.utterances:
            return
        if self._queue is None:
            self._queue = asyncio.Queue(QUEUE_LIMIT)
            self._workers = [
                asyncio.get_running_loop().create_task(self._work(), name=f"post-call-{n}")
                for n in range(self._settings.summary_workers)
            ]
        try:
            self._queue.put_nowait(call)
        except asyncio.QueueFull:
            logger.error(f"call {call.id}: no summary, {QUEUE_LIMIT} calls wait for one already")
            call.analysis = {"error": "the summary queue was full"}

    async def close(self) -> None:
        for worker in self._workers:
            worker.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        self._queue = None

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            call = await self._queue.get()
            try:
                call.analysis = await self._analyse(call)
            except Exception:  # never let one call stop the worker
                logger.exception(f"call {call.id}: the post-call step failed")
                call.analysis = {"error": "the post-call step failed (see the server log)"}
            if self._on_done is not None:
                self._on_done(call)

    async def _analyse(self, call: Call) -> dict[str, Any]:
        attempts = self._settings.summary_attempts
        last_error = ""
        for attempt in range(1, attempts + 1):
            try:
                result = parse_analysis(await self._ask(call.utterances or []))
            except Exception as exc:
                last_error = f"{type(exc).__name__}: {exc}"[:300]
                logger.warning(
                    f"call {call.id}: summary attempt {attempt}/{attempts} failed: {last_error}"
                )
                if attempt < attempts:
                    await asyncio.sleep(self._backoff_s * 2 ** (attempt - 1))
                continue
            return {
                **result,
                "model": self._llm.model,
                "prompt_version": self._settings.summary_prompt_version,
                "created_at": time.time(),
                "attempts": attempt,
            }
        return {
            "error": f"no summary after {attempts} attempts: {last_error}",
            "model": self._llm.model,
            "prompt_version": self._settings.summary_prompt_version,
        }

    async def _ask(self, utterances: list[dict[str, Any]]) -> str:
        client = shared_openai_client(api_key=self._llm.api_key, base_url=self._llm.base_url)
        stream = await client.chat.completions.create(
            model=self._llm.model,
            messages=[
                {"role": "system", "content": PROMPT},
                {"role": "user", "content": transcript_text(utterances)},
            ],
            temperature=0,
            stream=True,
        )
        parts: list[str] = []
        async for chunk in stream:
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    parts.append(choice.delta.content)
        return "".join(parts)
