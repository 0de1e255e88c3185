"""Which calls may join an interpreted session, and what a party's leaving does to it."""

from __future__ import annotations

import pytest

from agent.calls import CallRegistry
from agent.interpreter.sessions import InterpreterError, InterpreterSessions


def sessions_and_calls(*, ttl_s: float = 900.0) -> tuple[InterpreterSessions, CallRegistry]:
    return InterpreterSessions(ttl_s=ttl_s), CallRegistry(max_calls=4)


def test_a_session_has_a_caller_and_an_agent_each_with_a_language() -> None:
    sessions, _ = sessions_and_calls()
    session = sessions.create(caller_language="Spanish", agent_language="English")
    assert len(session.id) >= 20  # the id is the capability: not guessable
    caller, agent = session.parties["caller"], session.parties["agent"]
    assert (caller.language, agent.language) == ("Spanish", "English")
    assert caller.peer is agent and agent.peer is caller
    assert sessions.find(session.id) is session


@pytest.mark.parametrize(
    ("session_id", "role", "status", "message"),
    [
        (None, "caller", 400, "must be the session_id that POST /interpreter/sessions returned"),
        ("x" * 65, "caller", 400, "must be the session_id"),
        ("<script>", "caller", 400, "must be the session_id"),
        ("no-such-session", "caller", 404, "unknown or expired interpreted session no-suc…"),
        ("KNOWN", "interpreter", 400, "'party' must be 'caller' or 'agent'"),
        ("KNOWN", None, 400, "'party' must be 'caller' or 'agent'"),
    ],
)
def test_a_bad_session_or_party_is_refused_with_the_reason(
    session_id: str | None, role: str | None, status: int, message: str
) -> None:
    sessions, _ = sessions_and_calls()
    known = sessions.create(caller_language="English", agent_language="French")
    with pytest.raises(InterpreterError) as refused:
        sessions.check(known.id if session_id == "KNOWN" else session_id, role)
    assert refused.value.status == status
    assert message in str(refused.value)


def test_each_party_joins_once() -> None:
    sessions, registry = sessions_and_calls()
    session = sessions.create(caller_language="English", agent_language="French")
    first = registry.reserve("twilio")
    party = sessions.join(session.id, "caller", first)
    assert sessions.party_of(first) is party
    assert first.attributes == {"interpreter_session": session.id, "party": "caller"}
    with pytest.raises(InterpreterError, match="the caller of this interpreted session has joined"):
        sessions.check(session.id, "caller")
    sessions.check(session.id, "agent")  # the other side is still free


def test_an_unjoined_session_expires() -> None:
    sessions, _ = sessions_and_calls(ttl_s=0.0)
    session = sessions.create(caller_language="English", agent_language="French")
    with pytest.raises(InterpreterError, match="unknown or expired") as refused:
        sessions.check(session.id, "caller")
    assert refused.value.status == 404


def test_a_call_that_never_started_frees_its_party_for_another_try() -> None:
    sessions, registry = sessions_and_calls()
    session = sessions.create(caller_language="English", agent_language="French")
    failed = registry.reserve("webrtc")
    sessions.join(session.id, "agent", failed)
    sessions.leave(failed)  # e.g. its offer could not be negotiated
    assert not session.ended
    sessions.join(session.id, "agent", registry.reserve("webrtc"))


async def test_once_a_party_has_left_the_session_is_over() -> None:
    sessions, registry = sessions_and_calls()
    session = sessions.create(caller_language="English", agent_language="French")
    call = registry.reserve("twilio")
    party = sessions.join(session.id, "caller", call)
    await session.arrived(party)  # its pipeline started (no worker: nothing to tell)
    sessions.leave(call)
    assert session.ended and party.left
    with pytest.raises(InterpreterError, match="has ended") as refused:
        sessions.check(session.id, "agent")
    assert refused.value.status == 409


def test_there_is_a_bound_on_open_sessions() -> None:
    sessions = InterpreterSessions(max_sessions=2)
    for _ in range(2):
        sessions.create(caller_language="English", agent_language="French")
    with pytest.raises(InterpreterError, match="2 interpreted sessions are open") as refused:
        sessions.create(caller_language="English", agent_language="French")
    assert refused.value.status == 503
