"""Is vLLM ready? ``GET /health`` on the upstream, with a short timeout and a short cache.

SageMaker decides whether to route traffic (and, at start, whether the container lives)
from ``/ping``; the bridge is only useful when vLLM is, so ``/ping`` mirrors vLLM's health.
The cache keeps a burst of pings from becoming a burst of probes.
"""

from __future__ import annotations

import asyncio
import time

import httpx


class HealthProbe:
    """Probes one URL; at most one probe in flight, its answer reused for ``cache_s``."""

    def __init__(self, *, url: str, timeout_s: float, cache_s: float) -> None:
        self._url = url
        self._cache_s = cache_s
        self._client = httpx.AsyncClient(timeout=timeout_s, trust_env=False)
        self._lock = asyncio.Lock()
        self._checked_at = float("-inf")
        self._healthy = False
        self.last_error = ""

    async def healthy(self) -> bool:
        async with self._lock:
            if time.monotonic() - self._checked_at < self._cache_s:
                return self._healthy
            self._healthy = await self._probe()
            self._checked_at = time.monotonic()
            return self._healthy

    async def _probe(self) -> bool:
        try:
            response = await self._client.get(self._url)
        except httpx.HTTPError as exc:
            self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return False
        if response.status_code != 200:
            self.last_error = f"{self._url} answered HTTP {response.status_code}"
            return False
        self.last_error = ""
        return True

    async def aclose(self) -> None:
        await self._client.aclose()
