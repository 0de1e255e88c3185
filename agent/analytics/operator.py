"""The operator's view of analytics calls (all behind ``server.api_token``).

- ``GET /analytics``: the live page (HTML; it asks for the token, then calls the API below).
- ``GET /analytics/api/calls``: analytics calls in progress.
- ``GET /analytics/api/calls/{id}/live``: newline-delimited JSON: a ``snapshot`` of the call,
  then each event as it happens (``speech`` started/stopped, ``interim``, ``utterance``,
  ``ended``, ``analysis``); it ends once the call has ended and its summary (if one is due)
  has come, or when the client goes.
- ``GET /analytics/api/records?q=&since=&until=&limit=``: records of running and recent
  calls (analytics calls and the agent's), newest first, whose words contain ``q`` and that
  ran within ``[since, until]`` (Unix seconds).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Header, HTTPException, Query
from fastapi.responses import FileResponse, StreamingResponse

from agent.analytics.store import AnalyticsCalls, matches
from agent.calls import Call, CallRegistry

PAGE_DIR = Path(__file__).resolve().parent / "page"

HEARTBEAT_S = 15.0
"""An idle live stream sends ``{"type": "heartbeat"}`` this often (proxies close silent ones)."""


def operator_router(
    *,
    calls: AnalyticsCalls,
    registry: CallRegistry,
    check: Callable[[str | None], None],
    summary_due: Callable[[Call], bool],
) -> APIRouter:
    """The routes; ``check(authorization)`` raises the 401/404 of the operator API."""
    router = APIRouter()

    @router.get("/analytics", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(PAGE_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    @router.get("/analytics/page/{name}", include_in_schema=False)
    async def asset(name: str) -> FileResponse:
        if name not in ("app.js", "style.css"):
            raise HTTPException(404, "no such file")
        return FileResponse(PAGE_DIR / name, headers={"Cache-Control": "no-cache"})

    @router.get("/analytics/api/calls")
    async def running(authorization: str | None = Header(default=None)) -> dict[str, Any]:
        check(authorization)
        return {
            "calls": [
                {
                    "id": c.call.id,
                    "kind": c.call.kind,
                    "started_at": c.call.started_at,
                    "attributes": dict(c.call.attributes),
                    "utterances": len(c.call.utterances or []),
                }
                for c in calls.running()
            ]
        }

    @router.get("/analytics/api/calls/{call_id}/live")
    async def live(
        call_id: str, authorization: str | None = Header(default=None)
    ) -> StreamingResponse:
        check(authorization)
        conversation = calls.find(call_id)
        if conversation is None:
            raise HTTPException(404, f"no running or recent analytics call {call_id!r}")

        async def events() -> AsyncIterator[str]:
            with conversation.watch() as queue:
                yield json.dumps(conversation.snapshot()) + "\n"
                while not _complete(conversation.ended, conversation.call, summary_due):
                    try:
                        event = await asyncio.wait_for(queue.get(), HEARTBEAT_S)
                    except TimeoutError:
                        event = {"type": "heartbeat"}
                    yield json.dumps(event) + "\n"

        return StreamingResponse(
            events(),
            media_type="application/x-ndjson",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @router.get("/analytics/api/records")
    async def search(
        q: str | None = Query(default=None, max_length=200),
        since: float | None = None,
        until: float | None = None,
        limit: int = Query(default=50, ge=1, le=500),
        authorization: str | None = Header(default=None),
    ) -> dict[str, Any]:
        check(authorization)
        seen: set[str] = set()
        records: list[dict[str, Any]] = []
        everything = [c.call for c in calls.all()] + registry.calls() + registry.recent()
        for call in everything:
            if call.id in seen:
                continue
            seen.add(call.id)
            record = call.as_record()
            if matches(record, text=q, since=since, until=until):
                records.append(record)
        records.sort(key=lambda r: r["started_at"], reverse=True)
        return {"records": records[:limit], "total": len(records)}

    return router


def _complete(ended: bool, call: Call, summary_due: Callable[[Call], bool]) -> bool:
    """The call has ended and its summary, if one is due, has come."""
    return ended and (call.analysis is not None or not summary_due(call))
