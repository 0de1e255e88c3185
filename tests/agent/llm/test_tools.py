"""The tools registry and the example tool."""

from __future__ import annotations

from typing import Any

import pytest

from agent.llm.tools import UnknownTool, get_current_time, tools_named


class Params:
    """The two fields of FunctionCallParams the handler uses."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments
        self.results: list[Any] = []

    async def result_callback(self, result: Any, **_kwargs: Any) -> None:
        self.results.append(result)


async def test_get_current_time_answers_in_the_zone_asked() -> None:
    params = Params({"timezone": "Europe/Paris"})
    await get_current_time(params)  # type: ignore[arg-type]
    (result,) = params.results
    assert result["timezone"] == "Europe/Paris"
    assert result["iso"][-6:] in ("+01:00", "+02:00")


async def test_get_current_time_explains_a_bad_zone() -> None:
    params = Params({"timezone": "Mars/Olympus"})
    await get_current_time(params)  # type: ignore[arg-type]
    assert "unknown time zone" in params.results[0]["error"]


def test_unknown_tool_names_the_known_ones() -> None:
    with pytest.raises(UnknownTool, match="get_current_time"):
        tools_named(["launch_rockets"])
