"""Property-based fuzzing of every parser that reads what callers send: a media-stream message
(in a call and as the first message, for each carrier), the Twilio webhook form, the Telnyx
webhook body, WebRTC offers and ICE patches. Each either accepts the input or refuses it with a
clear error of its kind, never anything else."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import time
from functools import cache
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipecat.frames.frames import Frame

from agent.config import Settings, load_settings
from agent.fastpath.media_stream_reader import RealTimeBudget
from agent.fastpath.twilio_serializer import BatchingTwilioSerializer
from agent.server import create_app
from agent.transports.telephony import (
    StreamStart,
    TelephonyProvider,
    TwilioProvider,
    twilio_signature,
)
from agent.transports.telnyx import TelnyxProvider
from agent.transports.webrtc import _offer_request, _patch_request, sdp_problem
from tests.fakes.telnyx_caller import PUBLIC_KEY, sign

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
payloads = st.one_of(
    st.binary(max_size=400).map(lambda b: base64.b64encode(b).decode()),
    st.text(max_size=40),
    json_values,
)
twilio_messages = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300),
    json_values.map(json.dumps),
    st.fixed_dictionaries(
        {
            "event": st.sampled_from(
                ["media", "dtmf", "start", "stop", "mark", "connected", "error", "x"]
            )
        },
        optional={
            "streamSid": json_values,
            "stream_id": json_values,
            "media": st.one_of(
                json_values,
                st.fixed_dictionaries({"payload": payloads}, optional={"track": json_values}),
            ),
            "dtmf": st.one_of(json_values, st.fixed_dictionaries({"digit": json_values})),
            "start": st.one_of(
                json_values,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "streamSid": json_values,
                        "callSid": json_values,
                        "customParameters": json_values,
                        "call_control_id": json_values,
                        "media_format": st.one_of(
                            json_values,
                            st.fixed_dictionaries(
                                {},
                                optional={
                                    "encoding": st.sampled_from(["PCMU", "PCMA", "OPUS"])
                                    | json_values,
                                    "sample_rate": st.sampled_from([8000, "8000", 16000])
                                    | json_values,
                                    "channels": json_values,
                                },
                            ),
                        ),
                    },
                ),
            ),
        },
    ).map(json.dumps),
)


TELNYX_SETTINGS = load_settings("default", overrides={"telnyx": {"public_key": PUBLIC_KEY}})


def provider(name: str, settings_: Settings = TELNYX_SETTINGS) -> TelephonyProvider:
    return TwilioProvider(settings_) if name == "twilio" else TelnyxProvider(settings_)


@cache
def webhook_app(carrier: str) -> FastAPI:
    """One app per carrier for all of a test's examples (building one for each of 150 cost
    more than the posts); every post comes from the same address as fast as it can, so the
    per-source rate limit is raised out of the way (its own tests are elsewhere)."""
    limits = {"requests_per_source_per_s": 1e6, "request_burst_per_source": 1_000_000}
    overrides: dict[str, Any] = {"server": limits}
    if carrier == "twilio":
        overrides["twilio"] = {"auth_token": "secret"}
    else:
        overrides["telnyx"] = {"public_key": PUBLIC_KEY}
    return create_app(load_settings("default", overrides=overrides))


# No per-example deadline: an event loop per example on a loaded 2-core machine took 285 ms
# once (Hypothesis's default deadline is 200 ms); these tests are about verdicts, not speed.
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(twilio_messages, min_size=1, max_size=6))
def test_in_a_call_any_message_is_decoded_or_reported_never_raised(messages: list[Any]) -> None:
    reported: list[str] = []

    async def decode() -> list[Frame | None]:
        serializer = BatchingTwilioSerializer(
            "MZ1",
            "CA1",
            on_stop=lambda: None,
            on_bad_message=lambda why, sample: reported.append(why),
            frame_ms=60,
            budget=RealTimeBudget(8000, burst_s=2.0),
        )
        await serializer.setup(SimpleNamespace(audio_in_sample_rate=8000))  # type: ignore[arg-type]
        return [await serializer.deserialize(message) for message in messages]

    asyncio.run(decode())
    assert all(isinstance(why, str) and why for why in reported)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(twilio_messages, min_size=1, max_size=6), st.sampled_from(["PCMU", "PCMA"]))
def test_in_a_telnyx_call_any_message_is_decoded_or_reported_never_raised(
    messages: list[Any], codec: str
) -> None:
    reported: list[str] = []

    async def decode() -> list[Frame | None]:
        start = StreamStart("S1", "v3:1", attributes={"codec": codec})
        serializer = provider("telnyx").serializer(
            start, on_stop=lambda: None, on_bad_message=lambda why, sample: reported.append(why)
        )
        await serializer.setup(SimpleNamespace(audio_in_sample_rate=8000))  # type: ignore[arg-type]
        return [await serializer.deserialize(message) for message in messages]

    asyncio.run(decode())
    assert all(isinstance(why, str) and why for why in reported)


@pytest.mark.parametrize("carrier", ["twilio", "telnyx"])
@settings(max_examples=600)
@given(st.one_of(json_values, twilio_messages.map(lambda m: m if isinstance(m, str) else "")))
def test_a_start_message_is_parsed_or_refused_with_a_value_error(
    carrier: str, message: Any
) -> None:
    if isinstance(message, str):
        try:
            message = json.loads(message)
        except ValueError:
            return
    if not isinstance(message, dict):
        return
    try:
        start = provider(carrier).parse_start(message)
    except ValueError as exc:
        assert str(exc)
    else:
        assert start is None or (start.stream_id and isinstance(start.call_id, str))


@settings(max_examples=300)
@given(
    st.one_of(json_values, st.dictionaries(st.sampled_from(["sdp", "type", "pc_id"]), json_values))
)
def test_an_offer_body_is_accepted_or_refused_with_400(body: Any) -> None:
    if not isinstance(body, dict):
        return
    try:
        _offer_request(body)
    except HTTPException as exc:
        assert exc.status_code == 400 and "Error" not in str(exc.detail)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(["pc_id", "candidates"]),
        st.one_of(
            json_values,
            st.lists(
                st.dictionaries(
                    st.sampled_from(["candidate", "sdp_mid", "sdp_mline_index", "sdpMid"]),
                    json_values,
                ),
                max_size=3,
            ),
        ),
    )
)
def test_an_ice_patch_is_accepted_or_refused_with_400(body: dict[str, Any]) -> None:
    try:
        _patch_request(body)
    except HTTPException as exc:
        assert exc.status_code == 400 and "Error" not in str(exc.detail)


sdp_lines = st.sampled_from(
    [
        "v=0",
        "o=- 1 1 IN IP4 0.0.0.0",
        "s=-",
        "t=0 0",
        "m=audio 9 UDP/TLS/RTP/SAVPF 111",
        "m=video 9 UDP/TLS/RTP/SAVPF 96",
        "a=rtpmap:111 opus/48000/2",
        "a=ice-ufrag:abcd",
        "a=ice-pwd:0123456789abcdef012345",
        "a=fingerprint:sha-256 AB:CD",
        "a=setup:actpass",
        "a=mid:0",
        "c=IN IP4 0.0.0.0",
    ]
) | st.text(max_size=30)


@settings(max_examples=500)
@given(st.lists(sdp_lines, max_size=14).map("\r\n".join))
def test_any_sdp_text_gets_a_verdict_not_an_exception(sdp: str) -> None:
    problem = sdp_problem(sdp)
    assert problem is None or (isinstance(problem, str) and problem)


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.text(max_size=12), st.text(max_size=24), max_size=6),
    st.one_of(st.none(), st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)),
)
def test_the_webhook_answers_any_form_with_twiml_or_403(
    form: dict[str, str], signature: str | None
) -> None:
    app = webhook_app("twilio")

    async def post(sign: bool) -> httpx.Response:
        url = "http://t/telephony/twilio"
        headers = {"X-Twilio-Signature": twilio_signature(url, form, "secret")} if sign else {}
        if not sign and signature is not None:
            headers = {"X-Twilio-Signature": signature}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
            return await c.post("/telephony/twilio", data=form, headers=headers)

    signed, unsigned = asyncio.run(post(True)), asyncio.run(post(False))
    assert signed.status_code == 200 and "<Response>" in signed.text
    assert unsigned.status_code == 403
    assert app.state.registry.stats.started == 0


SIGNED_SECONDS = itertools.cycle(range(-290, 290))
"""Offsets from now, within Telnyx's 300 s tolerance: 580 webhooks before one repeats."""


@settings(max_examples=150, deadline=None)
@given(
    st.binary(max_size=300),
    st.dictionaries(
        st.sampled_from(["telnyx-timestamp", "telnyx-signature-ed25519", "x"]),
        st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=90),
        max_size=3,
    ),
)
def test_the_telnyx_webhook_answers_any_body_with_texml_or_403(
    body: bytes, headers: dict[str, str]
) -> None:
    app = webhook_app("telnyx")

    async def post(signed: bool) -> httpx.Response:
        # Each example is another webhook Telnyx signed (one app hears them all, and refuses
        # the same signed webhook twice as a replay): its own second within the tolerance.
        sent = sign(body, timestamp=int(time.time()) + next(SIGNED_SECONDS)) if signed else headers
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as c:
            return await c.post("/telephony/telnyx", content=body, headers=sent)

    signed, forged = asyncio.run(post(True)), asyncio.run(post(False))
    assert signed.status_code == 200 and "<Response>" in signed.text
    assert forged.status_code == 403
    assert app.state.registry.stats.started == 0
