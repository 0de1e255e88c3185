"""Per-source request limits: one client address cannot flood offers or webhooks.

A token bucket per source address (``rate_per_s`` refill, ``burst`` capacity); the least
recently seen sources are forgotten beyond ``max_sources``, so the table itself cannot grow
without bound. Behind a reverse proxy every request comes from the proxy: set the limits
there, or high enough here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class PerSourceLimiter:
    """Whether a request from ``source`` may go ahead now."""

    def __init__(
        self,
        *,
        rate_per_s: float,
        burst: int,
        max_sources: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_s <= 0 or burst < 1:
            raise ValueError("rate_per_s must be > 0 and burst >= 1")
        self._rate = rate_per_s
        self._burst = float(burst)
        self._max_sources = max_sources
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def allow(self, source: str) -> bool:
        now = self._clock()
        tokens, at = self._buckets.pop(source, (self._burst, now))
        tokens = min(self._burst, tokens + (now - at) * self._rate)
        allowed = tokens >= 1.0
        self._buckets[source] = (tokens - 1.0 if allowed else tokens, now)
        if len(self._buckets) > self._max_sources:
            self._buckets.popitem(last=False)
        return allowed

    @property
    def retry_after_s(self) -> int:
        """Seconds until a drained source may try again."""
        return max(1, round(1 / self._rate))
