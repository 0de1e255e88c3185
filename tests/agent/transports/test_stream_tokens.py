"""The token that ties a carrier's media stream to the webhook it signed: one stream, of one
call, within a minute; unforgeable, and never a crash whatever text a client sends."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.transports.stream_tokens import StreamTokens


def test_a_token_opens_one_stream_of_its_call_within_its_time() -> None:
    now = [1000.0]
    tokens = StreamTokens("secret", purpose="test", ttl_s=60, clock=lambda: now[0])
    first, second, third = tokens.issue("CA1"), tokens.issue("CA1"), tokens.issue("CA1")
    assert first != second
    assert not tokens.redeem(first, "CA2")  # another call's stream
    assert tokens.redeem(first, "CA1")
    assert not tokens.redeem(first, "CA1")  # once only
    assert tokens.redeem(third, "CA1")
    now[0] += 61
    assert not tokens.redeem(second, "CA1")  # too late


def test_a_token_cannot_be_forged_or_carried_to_another_carrier() -> None:
    tokens = StreamTokens("secret", purpose="twilio-stream")
    expires, nonce, mac = tokens.issue("CA1").split(".")
    forged = [f"{expires}.{nonce}.{'0' * 64}", f"{int(expires) + 3600}.{nonce}.{mac}", "", "a.b"]
    assert not any(tokens.redeem(token, "CA1") for token in forged)
    assert not StreamTokens("another secret", purpose="twilio-stream").redeem(
        tokens.issue("CA1"), "CA1"
    )
    telnyx = StreamTokens("secret", purpose="telnyx-stream")
    assert not telnyx.redeem(tokens.issue("CA1"), "CA1")


digits_of_any_script = st.text(st.characters(categories=["Nd", "No"]), min_size=1)


@given(st.one_of(st.text(), st.tuples(digits_of_any_script, st.text(), st.text()).map(".".join)))
def test_any_unicode_token_is_refused_not_raised(token: str) -> None:
    assert StreamTokens("secret", purpose="test").redeem(token, "CA1") is False
