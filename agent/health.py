"""Readiness: can a new call reach the STT, the LLM and the TTS right now?

Each probe is cheap and bounded by a timeout: the WebSocket STT must accept a connection and
say ``session.created``; an OpenAI-compatible LLM must answer ``GET {base_url}/models``; the
TTS server must answer (Piper: ``GET /info``; others: any HTTP answer). Parts that need
nothing (the offline responder) are ready.
SageMaker STT is not probed: opening a stream is an invocation.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from agent.config import Settings
from agent.local.piper_server import READY_PATH as PIPER_READY_PATH
from agent.stt.channels import ChannelError, bearer_auth, websocket_channel_factory
from agent.stt.session import start_session

PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    ok: bool
    detail: str
    latency_ms: float | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"ok": self.ok, "detail": self.detail}
        if self.latency_ms is not None:
            out["latency_ms"] = round(self.latency_ms, 1)
        return out


async def check_stt(settings: Settings, *, limit_s: float = PROBE_TIMEOUT_S) -> ComponentStatus:
    stt = settings.stt
    if stt.transport == "sagemaker":
        return ComponentStatus(
            True, f"SageMaker endpoint {stt.sagemaker.endpoint_name!r} (not probed)"
        )
    open_channel = websocket_channel_factory(stt.url, api_key=stt.api_key, open_timeout=limit_s)
    started = time.perf_counter()
    try:
        async with asyncio.timeout(limit_s):
            channel = await open_channel()
            try:
                await start_session(channel, model=None, timeout_s=limit_s)
            finally:
                await channel.close()
    except TimeoutError:
        return ComponentStatus(False, f"{stt.url}: no session.created within {limit_s} s")
    except ChannelError as exc:
        return ComponentStatus(False, f"{stt.url}: {exc}")
    return ComponentStatus(True, stt.url, (time.perf_counter() - started) * 1000)


async def check_llm(
    settings: Settings, client: httpx.AsyncClient, *, limit_s: float = PROBE_TIMEOUT_S
) -> ComponentStatus:
    llm = settings.llm
    if llm.kind == "echo" or not llm.base_url:
        return ComponentStatus(True, "echo: the offline responder repeats what it heard")
    url = llm.base_url.rstrip("/") + "/models"
    return await _http_probe(client, url, bearer_auth(llm.api_key) or {}, limit_s, need_ok=True)


async def check_tts(
    settings: Settings, client: httpx.AsyncClient, *, limit_s: float = PROBE_TIMEOUT_S
) -> ComponentStatus:
    tts = settings.tts
    base = tts.base_url.rstrip("/")
    if tts.kind == "piper":  # Piper's server answers GET /info once its voice is loaded
        return await _http_probe(client, base + PIPER_READY_PATH, {}, limit_s, need_ok=True)
    # Speech servers differ in what else they serve: any HTTP answer below 500 shows this one
    # is up, while synthesizing a probe sentence would cost real work.
    headers = bearer_auth(tts.api_key) or {}
    return await _http_probe(client, base + "/models", headers, limit_s, need_ok=False)


async def _http_probe(
    client: httpx.AsyncClient, url: str, headers: dict[str, str], limit_s: float, *, need_ok: bool
) -> ComponentStatus:
    started = time.perf_counter()
    try:
        response = await client.get(url, headers=headers, timeout=limit_s)
    except httpx.HTTPError as exc:
        return ComponentStatus(False, f"{url}: {exc or type(exc).__name__}")
    latency = (time.perf_counter() - started) * 1000
    bad = response.status_code >= 400 if need_ok else response.status_code >= 500
    if bad:
        return ComponentStatus(False, f"{url}: HTTP {response.status_code}", latency)
    return ComponentStatus(True, url, latency)


async def readiness(settings: Settings) -> dict[str, ComponentStatus]:
    """Probe all three components concurrently."""
    async with httpx.AsyncClient() as client:
        stt, llm, tts = await asyncio.gather(
            check_stt(settings), check_llm(settings, client), check_tts(settings, client)
        )
    return {"stt": stt, "llm": llm, "tts": tts}
