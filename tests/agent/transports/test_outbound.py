"""Outbound calls: ``voice-agent call`` asks the running server, the server asks Twilio (the
stand-in) to place the call, and when the callee answers its media stream runs the same
pipeline; answering machine detection reaches the call, and ``server.max_calls`` holds."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx
import pytest

from tests.agent.transports.phone_stack import OPERATOR_TOKEN, phone_agent
from tests.agent.transports.stack import async_wait_for
from tests.conftest import requires_espeak
from tests.fakes.twilio_caller import ulaw_speech
from tests.fakes.twilio_rest import ACCOUNT_SID, TwilioStandIn

pytestmark = [requires_espeak, pytest.mark.timeout(120)]

CALLEE = "+15550123"


def greeter(_messages: list[dict[str, Any]]) -> str:
    return "Hello, this is the clinic calling about your appointment."


async def call_out(
    url: str, body: dict[str, str], token: str | None = OPERATOR_TOKEN
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        return await http.post(f"{url}/calls/outbound", json=body, headers=headers, timeout=20)


async def test_a_call_started_from_the_cli_reaches_the_pipeline_and_is_answered(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn(answered_by="human") as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            cli = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "agent.cli", "call", CALLEE, "--from", "+15550199",
                "--server", url, "--token", OPERATOR_TOKEN,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(cli.communicate(), 30)
            assert cli.returncode == 0, err.decode()
            placed = json.loads(out)
            assert placed["attributes"]["direction"] == "outbound"

            create = twilio.last()
            assert create.path == f"/2010-04-01/Accounts/{ACCOUNT_SID}/Calls.json"
            assert create.authorized
            assert create.form == {
                "To": CALLEE,
                "From": "+15550199",
                "Url": f"{url}/telephony/twilio/outbound",
                "MachineDetection": "Enable",
            }
            call_sid = placed["attributes"]["call_sid"]
            assert call_sid in twilio.calls

            callee = await twilio.stream_of(call_sid)
            registry = app.state.registry
            async with callee.quiet():
                await asyncio.sleep(0.3)
            await callee.speak(ulaw_speech("what is the weather like in paris today"))
            (call,) = registry.calls()
            async with callee.quiet():
                await async_wait_for(
                    lambda: "paris" in " ".join(call.user_transcript).lower(),
                    timeout_s=40,
                    what="the callee's words to reach the pipeline",
                )
                await async_wait_for(
                    lambda: (
                        any("clinic" in said for said in call.bot_transcript)
                        and len(callee.loud_at) > 10
                    ),
                    timeout_s=30,
                    what="the agent's reply",
                )
            assert call.id == placed["id"]  # the reserved slot, claimed by its stream
            assert call.attributes["answered_by"] == "human"
            assert call.attributes["call_sid"] == call_sid
            assert registry.stats.started == 1
            await callee.stop()
            await asyncio.wait_for(callee.closed.wait(), 10)


async def test_answering_machine_detection_reaches_the_call(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn(answered_by="machine_start") as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            response = await call_out(url, {"to": CALLEE})
            assert response.status_code == 201, response.text
            placed = response.json()
            assert twilio.last().form["From"] == "+15550199"  # twilio.from_number
            callee = await twilio.stream_of(placed["attributes"]["call_sid"])
            await async_wait_for(
                lambda: bool(app.state.registry.calls()), timeout_s=5, what="the call"
            )
            assert app.state.registry.calls()[0].attributes["answered_by"] == "machine_start"
            await callee.stop()
            await asyncio.wait_for(callee.closed.wait(), 10)


async def test_outbound_calls_hold_their_slot_and_respect_max_calls(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn(answer_delay_s=30) as twilio:  # it keeps ringing
        with phone_agent(
            asr_server_url,
            asr_model_name,
            twilio,
            greeter,
            max_calls=1,
            overrides={"twilio": {"outbound_answer_timeout_s": 1.5}},
        ) as (url, app, _chat):
            registry = app.state.registry
            first = await call_out(url, {"to": CALLEE})
            assert first.status_code == 201
            assert registry.stats.active == 1  # held while it rings

            second = await call_out(url, {"to": "+15550124"})
            assert second.status_code == 503 and "max_calls" in second.json()["detail"]
            assert len([r for r in twilio.requests if r.path.endswith("/Calls.json")]) == 1

            await async_wait_for(lambda: registry.stats.active == 0, timeout_s=5, what="expiry")
            (call,) = registry.recent()
            assert call.end_reason == "not answered"


@pytest.mark.parametrize(
    ("token", "body", "status"),
    [
        (None, {"to": CALLEE}, 401),
        ("wrong", {"to": CALLEE}, 401),
        (OPERATOR_TOKEN, {"to": "5550123"}, 400),
        (OPERATOR_TOKEN, {"to": CALLEE, "from": "not a number"}, 400),
    ],
)
async def test_a_bad_outbound_request_is_refused_and_twilio_is_not_asked(
    asr_server_url: str, asr_model_name: str, token: str | None, body: dict[str, str], status: int
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            response = await call_out(url, body, token)
            assert response.status_code == status, response.text
            assert twilio.requests == [] and app.state.registry.stats.started == 0


async def test_twilio_refusing_the_call_gives_the_slot_back(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn(auth_token="rotated-token") as twilio:  # our token is stale
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            response = await call_out(url, {"to": CALLEE})
            assert response.status_code == 502
            assert (
                "401" in response.json()["detail"]
                and "twilio.auth_token" in response.json()["detail"]
            )
            assert app.state.registry.stats.active == 0
            assert app.state.registry.recent()[0].end_reason == "carrier refused the call"


async def test_without_twilio_credentials_outbound_calls_say_what_to_set(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter, credentials=False) as (
            url,
            app,
            _chat,
        ):
            response = await call_out(url, {"to": CALLEE})
            assert response.status_code == 400
            assert "twilio.account_sid" in response.json()["detail"]
            assert twilio.requests == [] and app.state.registry.stats.started == 0


async def test_an_outbound_call_joins_an_interpreted_session_as_the_party_named(
    asr_server_url: str, asr_model_name: str
) -> None:
    async with TwilioStandIn(answered_by="human") as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            async with httpx.AsyncClient() as http:
                made = await http.post(
                    f"{url}/interpreter/sessions",
                    json={"caller_language": "English", "agent_language": "French"},
                    headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"},
                )
            sid = made.json()["session_id"]
            for body, status, why in (
                ({"interpreter_session": sid + "x", "party": "agent"}, 404, "unknown"),
                ({"interpreter_session": sid, "party": "boss"}, 400, "'party'"),
            ):  # refused before Twilio is asked or a slot is taken
                refused = await call_out(url, {"to": CALLEE, **body})
                assert refused.status_code == status and why in refused.text, refused.text
            assert twilio.requests == [] and app.state.registry.stats.started == 0

            as_agent = {"to": CALLEE, "interpreter_session": sid, "party": "agent"}
            placed = await call_out(url, as_agent)
            assert placed.status_code == 201, placed.text
            assert twilio.last().form["Url"] == (
                f"{url}/telephony/twilio/outbound?interpreter_session={sid}&party=agent"
            )
            callee = await twilio.stream_of(placed.json()["attributes"]["call_sid"])
            session = app.state.interpreter.find(sid)
            await async_wait_for(
                lambda: session.parties["agent"].present, timeout_s=15, what="the agent joined"
            )
            (call,) = app.state.registry.calls()
            assert call.id == placed.json()["id"]  # the reserved slot, claimed by its stream
            assert call.attributes["interpreter_session"] == sid
            assert call.attributes["party"] == "agent"
            taken = await call_out(url, as_agent)
            assert taken.status_code == 409 and "joined already" in taken.text, taken.text
            await callee.stop()
            await asyncio.wait_for(callee.closed.wait(), 10)


async def test_the_cli_names_the_session_and_says_why_it_was_refused(
    asr_server_url: str, asr_model_name: str
) -> None:
    async def cli(*args: str) -> tuple[int | None, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agent.cli", "call", CALLEE, *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _out, err = await asyncio.wait_for(process.communicate(), 30)
        return process.returncode, err.decode()

    async with TwilioStandIn() as twilio:
        with phone_agent(asr_server_url, asr_model_name, twilio, greeter) as (url, app, _chat):
            server = ["--server", url, "--token", OPERATOR_TOKEN]
            unknown = await cli(
                "--interpreter-session", "no-such-session", "--party", "agent", *server
            )
            alone = await cli("--interpreter-session", "no-such-session", *server)
            assert twilio.requests == [] and app.state.registry.stats.started == 0
    assert unknown[0] == 2 and "404: unknown or expired interpreted session" in unknown[1]
    assert alone[0] == 2 and "--interpreter-session and --party go together" in alone[1]
