"""The operator's routes for interpreted sessions (Bearer ``server.api_token``, as the rest
of the operator API):

- ``POST /interpreter/sessions`` ``{"caller_language"?, "agent_language"?}`` → 201 with the
  ``session_id`` and how each party joins (the Twilio webhook URL with the id, and the WebRTC
  offer's ``request_data``). The languages default to ``translation.source_language``
  (the caller's) and ``translation.target_language`` (the agent's).
- ``GET /interpreter/sessions/{id}`` → who has joined, who is there, who has left.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Body, Header, HTTPException, Request

from agent.config import Settings
from agent.interpreter.sessions import (
    PARTY_PARAMETER,
    ROLES,
    SESSION_PARAMETER,
    InterpreterError,
    InterpreterSessions,
)

MAX_LANGUAGE_CHARS = 40


def interpreter_router(
    sessions: InterpreterSessions,
    *,
    settings: Settings,
    check: Callable[[str | None], None],
    base_url: Callable[[Request], str],
) -> APIRouter:
    """The routes; ``check(authorization)`` raises the operator API's 401/404, ``base_url``
    gives the server's public ``http(s)://host`` for a request."""
    router = APIRouter()

    @router.post("/interpreter/sessions", status_code=201)
    async def create(
        request: Request,
        caller_language: str | None = Body(default=None, embed=True),
        agent_language: str | None = Body(default=None, embed=True),
        authorization: str | None = Header(default=None),
    ) -> dict[str, Any]:
        check(authorization)
        if not settings.llm.base_url:
            raise HTTPException(
                400,
                "interpreted sessions translate with the LLM: set llm.base_url (an "
                "OpenAI-compatible chat server) and restart",
            )
        languages = {
            "caller_language": caller_language or settings.translation.source_language,
            "agent_language": agent_language or settings.translation.target_language,
        }
        for name, language in languages.items():
            if len(language) > MAX_LANGUAGE_CHARS or not language.strip().isprintable():
                raise HTTPException(
                    400, f"{name} must be a language's name, e.g. 'Spanish' (at most 40 chars)"
                )
        try:
            session = sessions.create(**{k: v.strip() for k, v in languages.items()})
        except InterpreterError as exc:
            raise HTTPException(exc.status, str(exc)) from None
        carriers = ["twilio", "telnyx"] if settings.telnyx.public_key else ["twilio"]
        join: dict[str, dict[str, Any]] = {}
        for role in ROLES:
            named = {SESSION_PARAMETER: session.id, PARTY_PARAMETER: role}
            join[role] = {
                f"{carrier}_webhook": f"{base_url(request)}/telephony/{carrier}?{urlencode(named)}"
                for carrier in carriers
            }
            join[role]["webrtc_request_data"] = named
        return {**session.as_dict(), "join": join}

    @router.get("/interpreter/sessions/{session_id}")
    async def show(
        session_id: str, authorization: str | None = Header(default=None)
    ) -> dict[str, Any]:
        check(authorization)
        session = sessions.find(session_id)
        if session is None:
            raise HTTPException(404, "unknown or expired interpreted session")
        return session.as_dict()

    return router
