"""The interpreted sessions of one server: two calls, one per party, paired by a session id.

A contact centre's interpreter joins two people who do not share a language: a caller (on
the phone, or in a browser) and an agent (in a browser, or on the phone). An operator creates
the session (``POST /interpreter/sessions``, behind ``server.api_token``:
:mod:`agent.interpreter.routes`) with each party's language, and hands its id to the two
calls: a Twilio number's webhook URL carries it as a query parameter, which the TwiML hands
to the media stream as a ``<Parameter>``; a WebRTC offer carries it in ``request_data``.

The id is the capability: 128 random bits, made only by an operator, good for one call per
party, forgotten :data:`SESSION_TTL_S` after it was made if nobody joined, or after a party
left (it is over then: the other party is told and its call ends). Sessions
live in this replica's memory: both calls must reach the same replica (one replica, or a
balancer that routes on the id).

Each party's call runs :mod:`pipelines.interpreter`: its speech is translated from its own
language into the other party's, and the :class:`~agent.interpreter.relay.PeerRelay` in its
pipeline queues the translation into the other party's worker, where the TTS speaks it.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final, Literal, cast

from loguru import logger
from pipecat.frames.frames import EndFrame, Frame, TTSSpeakFrame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame

from agent.calls import Call
from agent.interpreter.notices import JOINED, PEER_LEFT, WAITING, NoticeTranslations

PartyRole = Literal["caller", "agent"]
ROLES: Final[tuple[PartyRole, PartyRole]] = ("caller", "agent")

SESSION_PARAMETER: Final = "interpreter_session"
"""The name that carries the session id: a webhook's query parameter, a stream's
``<Parameter>``, a WebRTC offer's ``request_data`` key, and a call's attribute."""
PARTY_PARAMETER: Final = "party"
"""The name that carries which party a call is (``caller`` or ``agent``)."""

_SESSION_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What :func:`secrets.token_urlsafe` makes (anything else is refused before it is looked up)."""

SESSION_TTL_S: Final = 15 * 60.0
"""How long a session waits for its first call before it is forgotten."""
MAX_SESSIONS: Final = 1000
"""Sessions that may wait at once: a bound on what a leaked operator token can fill."""

FROM_PEER: Final = "interpreter_from"
"""``Frame.metadata`` key set on frames queued into a call by its peer (its role)."""


class InterpreterError(ValueError):
    """A call named a session it cannot join; the message says why and what to do."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.status = status
        """The HTTP status that fits (400 malformed, 404 unknown, 409 taken or over)."""


@dataclass(eq=False)
class Party:
    """One side of a session: its language, and once it has joined, its call and worker."""

    role: PartyRole
    language: str
    session: InterpreterSession = field(repr=False)
    call: Call | None = field(default=None, repr=False)
    worker: PipelineWorker | None = field(default=None, repr=False)
    present: bool = False
    """Its pipeline has started: frames queued into its worker are heard."""
    left: bool = False

    @property
    def peer(self) -> Party:
        return self.session.peer_of(self)


@dataclass(eq=False)
class InterpreterSession:
    """Two parties, each with its language; translations flow between their workers."""

    id: str
    parties: dict[PartyRole, Party] = field(default_factory=dict)
    created: float = field(default_factory=time.monotonic)
    ended_at: float | None = None
    notices: NoticeTranslations | None = field(default=None, repr=False)
    """The notices in each party's language (``None``: as written, in English)."""
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, repr=False)

    @property
    def ended(self) -> bool:
        """A party has left: nobody may join any more."""
        return self.ended_at is not None

    def peer_of(self, party: Party) -> Party:
        return self.parties["agent" if party.role == "caller" else "caller"]

    def as_dict(self) -> dict[str, object]:
        return {
            "session_id": self.id,
            "ended": self.ended,
            "parties": {
                role: {
                    "language": p.language,
                    "joined": p.call is not None,
                    "present": p.present,
                    "left": p.left,
                    "call_id": p.call.id if p.call else None,
                }
                for role, p in self.parties.items()
            },
        }

    async def arrived(self, party: Party) -> None:
        """``party``'s pipeline has started: tell it to wait, or tell both they are joined."""
        party.present = True
        peer = self.peer_of(party)
        if peer.left:  # it left while this call was still being set up
            self._tell_left(party, peer)
            return
        if not peer.present:
            waiting = [_message("interpreter-waiting", party), self._notice(WAITING, party)]
            await _queue(party, waiting)
            return
        logger.info(f"interpreter session {_short(self.id)}: both parties are here")
        for each in (party, peer):
            await _queue(each, [_message("interpreter-joined", each), self._notice(JOINED, each)])

    async def to_peer(self, party: Party, frames: Iterable[Frame]) -> bool:
        """Queue ``frames`` into the other party's call (marked as coming from ``party``);
        ``False`` (and dropped) while the other party is not there."""
        peer = self.peer_of(party)
        if not peer.present or peer.left:
            return False
        for frame in frames:
            frame.metadata[FROM_PEER] = party.role
        return await _queue(peer, frames)

    def leave(self, party: Party) -> None:
        """``party``'s call has ended: the session is over; the other party is told and its
        call ends once the words still on their way to it have been spoken."""
        if party.left:
            return
        party.left = True
        party.present = False
        self.ended_at = time.monotonic()
        peer = self.peer_of(party)
        logger.info(f"interpreter session {_short(self.id)}: the {party.role} left")
        if peer.present and not peer.left:
            self._tell_left(peer, party)

    def _tell_left(self, party: Party, gone: Party) -> None:
        """Tell ``party`` that ``gone`` left, then end its call (after what it still hears)."""
        if party.call is not None:
            party.call.end_because(f"the {gone.role} left the interpreted session")
        message = _message("interpreter-peer-left", party)
        task = asyncio.get_running_loop().create_task(
            _queue_and_log(party, [message, self._notice(PEER_LEFT, party), EndFrame()]),
            name=f"interpreter-{_short(self.id)}-left",
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _notice(self, notice: str, party: Party) -> TTSSpeakFrame:
        """``notice`` spoken to ``party``, in its language when the translation is ready."""
        text = self.notices.text(notice, party.language) if self.notices else notice
        return TTSSpeakFrame(text)


class InterpreterSessions:
    """Creates sessions, admits each party's call once, and tells a party when the other
    one leaves (:meth:`leave`, from the call registry's ``when_ended``)."""

    def __init__(
        self,
        *,
        ttl_s: float = SESSION_TTL_S,
        max_sessions: int = MAX_SESSIONS,
        notices: NoticeTranslations | None = None,
    ) -> None:
        self._notices = notices
        self._ttl_s = ttl_s
        self._max = max_sessions
        self._sessions: dict[str, InterpreterSession] = {}
        self._by_call: dict[str, Party] = {}

    def create(self, *, caller_language: str, agent_language: str) -> InterpreterSession:
        """A new session (its id is the capability the two calls present)."""
        self._forget_stale()
        if len(self._sessions) >= self._max:
            raise InterpreterError(
                f"{self._max} interpreted sessions are open; end some (or wait "
                f"{self._ttl_s:.0f} s for unjoined ones to expire)",
                status=503,
            )
        session = InterpreterSession(id=secrets.token_urlsafe(16), notices=self._notices)
        session.parties = {
            "caller": Party("caller", caller_language, session),
            "agent": Party("agent", agent_language, session),
        }
        if self._notices is not None:  # ready by the time the calls join, as a rule
            for language in (caller_language, agent_language):
                self._notices.prepare(language)
        self._sessions[session.id] = session
        logger.info(f"interpreter session {_short(session.id)} created")
        return session

    def find(self, session_id: str) -> InterpreterSession | None:
        self._forget_stale()
        return self._sessions.get(session_id)

    def check(self, session_id: object, role: object) -> Party:
        """The party a call asks to be (refused with a clear reason before it takes a slot).

        Raises:
            InterpreterError: malformed, unknown, expired or ended session; a role that is
                not ``caller`` or ``agent``; a party that has joined already.
        """
        if not isinstance(session_id, str) or not _SESSION_ID.fullmatch(session_id):
            raise InterpreterError(
                f"'{SESSION_PARAMETER}' must be the session_id that POST /interpreter/sessions "
                "returned",
                status=400,
            )
        if role not in ROLES:
            raise InterpreterError(
                f"'{PARTY_PARAMETER}' must be 'caller' or 'agent' (which side of the "
                "interpreted session this call is)",
                status=400,
            )
        session = self.find(session_id)
        if session is None:
            raise InterpreterError(
                f"unknown or expired interpreted session {_short(session_id)}…: create one with "
                "POST /interpreter/sessions",
                status=404,
            )
        if session.ended:
            raise InterpreterError(
                "this interpreted session has ended (a party left): create a new one",
                status=409,
            )
        party = session.parties[cast(PartyRole, role)]
        if party.call is not None:
            raise InterpreterError(
                f"the {role} of this interpreted session has joined already", status=409
            )
        return party

    def join(self, session_id: object, role: object, call: Call) -> Party:
        """Admit ``call`` as that party (:meth:`check` first); the call's attributes name
        the session and the party."""
        party = self.check(session_id, role)
        party.call = call
        call.attributes[SESSION_PARAMETER] = party.session.id
        call.attributes[PARTY_PARAMETER] = party.role
        self._by_call[call.id] = party
        return party

    def party_of(self, call: Call) -> Party | None:
        """The party ``call`` joined as, if it joined a session."""
        return self._by_call.get(call.id)

    def leave(self, call: Call) -> None:
        """A call has ended: if it was a party, its session ends (the other party is told)."""
        party = self._by_call.pop(call.id, None)
        if party is None:
            return
        if not party.present:  # its pipeline never started (a failed offer): it may retry
            party.call = party.worker = None
            return
        party.session.leave(party)

    def _forget_stale(self) -> None:
        horizon = time.monotonic() - self._ttl_s
        for session_id, session in list(self._sessions.items()):
            if session.ended_at is not None:  # kept a while to say "ended", not "unknown"
                stale = session.ended_at < horizon
            else:
                stale = session.created < horizon and all(
                    p.call is None for p in session.parties.values()
                )
            if stale:
                del self._sessions[session_id]


def _message(kind: str, party: Party) -> RTVIServerMessageFrame:
    peer = party.peer
    return RTVIServerMessageFrame(
        data={
            "type": kind,
            "session_id": party.session.id,
            "party": party.role,
            "language": party.language,
            "peer": peer.role,
            "peer_language": peer.language,
        }
    )


async def _queue(party: Party, frames: Iterable[Frame]) -> bool:
    worker = party.worker
    if worker is None or worker.has_finished():
        return False
    await worker.queue_frames(list(frames))
    return True


async def _queue_and_log(party: Party, frames: list[Frame]) -> None:
    try:
        await _queue(party, frames)
    except Exception:  # the other call may be ending too; never an unhandled task error
        logger.exception(f"interpreter: could not tell the {party.role} the other party left")


def _short(session_id: str) -> str:
    """Enough of an id to follow it in the log, not enough to join with it."""
    return session_id[:6]
