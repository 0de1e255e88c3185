"""Fuzzing the SageMaker channel's reading of response events: payload parts of any bytes and
completion states, container errors and stream failures, in any order. Whatever comes, the
channel yields text messages or ends with ``ChannelClosed``; it never raises anything else."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sdk = pytest.importorskip("aws_sdk_sagemaker_runtime_http2.models")
from agent.stt.channels import ChannelClosed  # noqa: E402
from agent.stt.sagemaker import SageMakerChannel  # noqa: E402

parts = st.builds(
    lambda data, kind, state: sdk.ResponseStreamEventPayloadPart(
        value=sdk.ResponsePayloadPart(bytes_=data, data_type=kind, completion_state=state)
    ),
    st.one_of(st.none(), st.binary(max_size=64), st.text(max_size=32).map(str.encode)),
    st.sampled_from([None, "UTF8", "BINARY", "other"]),
    st.sampled_from([None, "PARTIAL", "COMPLETE", "other"]),
)
endings = st.sampled_from(
    [
        None,
        sdk.ModelStreamError(message="container closed", error_code="1011"),
        sdk.ModelStreamError(message=None, error_code="not a number"),
        sdk.InternalStreamFailure(message="boom"),
        RuntimeError("a broken connection"),
    ]
)


class _Output:
    """The SDK's output stream: the events given, then the ending (``None``: end of stream)."""

    def __init__(self, events: list[Any], ending: Any) -> None:
        self._events = list(events)
        self._ending = ending

    async def receive(self) -> Any:
        if self._events:
            return self._events.pop(0)
        if isinstance(self._ending, BaseException):
            raise self._ending
        return None


class _Nothing:
    """Client, transport and input stream stand-ins: the reader never touches them."""

    async def close(self) -> None: ...

    async def settle(self, timeout: float = 0) -> None: ...

    async def abandon_bodies(self) -> None: ...

    @property
    def input_stream(self) -> _Nothing:
        return self


@settings(max_examples=400, deadline=None)
@given(st.lists(parts, max_size=12), endings, st.integers(min_value=16, max_value=200))
def test_any_response_events_give_messages_or_a_clean_end(
    events: list[Any], ending: Any, limit: int
) -> None:
    async def read_all() -> list[str]:
        nothing = _Nothing()
        channel = SageMakerChannel(
            client=nothing,  # type: ignore[arg-type]
            transport=nothing,  # type: ignore[arg-type]
            stream=nothing,
            output_stream=_Output(events, ending),
            description="fuzz",
            max_message_bytes=limit,
        )
        messages = []
        try:
            while True:
                messages.append(await asyncio.wait_for(channel.receive(), 5))
        except ChannelClosed:
            pass
        finally:
            await channel.close()
        return messages

    messages = asyncio.run(read_all())
    assert all(isinstance(m, str) and len(m.encode()) <= 4 * limit for m in messages)
