"""Tools the LLM may call, by name.

A tool is a Pipecat :class:`FunctionSchema` that carries its own handler: when the schema is
in the call's ``LLMContext`` the LLM service advertises it to the model and runs the
handler when the model calls it, and the result goes back to the model as a ``tool``
message. Tools are declared in code with :func:`register` and switched on per deployment by
name in config (``llm.tools = ["get_current_time"]``), because an OpenAI-compatible server
only accepts tools when it was started for them (vLLM: ``--enable-auto-tool-choice
--tool-call-parser ...``); the default is no tools.

Example::

    async def get_order(params: FunctionCallParams) -> None:
        await params.result_callback({"status": "shipped"})

    register(FunctionSchema(name="get_order", description="...", properties={...},
                            required=[...], handler=get_order))
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.services.llm_service import FunctionCallParams

_REGISTRY: dict[str, FunctionSchema] = {}


class UnknownTool(ValueError):
    """Config names a tool nobody registered."""


def register(tool: FunctionSchema) -> FunctionSchema:
    """Make ``tool`` available by its name (replacing any tool of the same name)."""
    _REGISTRY[tool.name] = tool
    return tool


def registered() -> list[str]:
    """Every tool name that can be switched on."""
    return sorted(_REGISTRY)


def tools_named(names: Iterable[str]) -> list[FunctionSchema]:
    """The schemas for ``names``, in that order.

    Raises:
        UnknownTool: a name is not registered; the message lists the known ones.
    """
    tools = []
    for name in names:
        if name not in _REGISTRY:
            raise UnknownTool(
                f"unknown tool {name!r} in llm.tools; registered tools: "
                f"{', '.join(registered()) or 'none'}"
            )
        tools.append(_REGISTRY[name])
    return tools


async def get_current_time(params: FunctionCallParams) -> None:
    """The example tool: the current date and time, in an IANA time zone if one is given."""
    zone_name = params.arguments.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(str(zone_name))
    except (ZoneInfoNotFoundError, ValueError):
        await params.result_callback(
            {"error": f"unknown time zone {zone_name!r}; use an IANA name like Europe/Paris"}
        )
        return
    now = datetime.now(UTC).astimezone(zone)
    await params.result_callback(
        {"timezone": str(zone), "iso": now.isoformat(timespec="seconds"), "spoken": _spoken(now)}
    )


def _spoken(moment: datetime) -> str:
    return moment.strftime("%A %d %B %Y, %H:%M")


GET_CURRENT_TIME = register(
    FunctionSchema(
        name="get_current_time",
        description="Get the current date and time. Use it whenever the user asks what time "
        "or what day it is.",
        properties={
            "timezone": {
                "type": "string",
                "description": "IANA time zone such as Europe/Paris; UTC if omitted.",
            }
        },
        required=[],
        handler=get_current_time,
    )
)
