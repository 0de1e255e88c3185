"""The turn handler: an OpenAI-compatible chat LLM, or the offline responder.

Which one a call gets is decided from the settings in :mod:`pipelines.services`.

- ``llm.kind = "openai"`` (a ``base_url`` set) or ``"local"`` (the default profile: the
  packaged SmolLM2-135M-Instruct behind llama.cpp's server, which ``voice-agent serve``
  starts; see :mod:`agent.local.llm_server`): :class:`OpenAICompatibleLLMService` streams chat
  completions from that server (vLLM, llama.cpp, or anything speaking OpenAI's
  ``/v1/chat/completions``) with the configured model, API key (always sent; "not-needed" by
  default, since an empty key makes the OpenAI client fall back to ``OPENAI_API_KEY``),
  temperature and max tokens. The system prompt goes out as a ``system`` role message and
  ``developer`` messages are sent as ``user``: vLLM's chat templates reject the ``developer``
  role. Tools named in ``llm.tools`` (see :mod:`agent.llm.tools`) reach the model and their
  results flow back.
- ``llm.kind = "echo"``: :class:`OfflineResponder` repeats what the user said (see
  :mod:`agent.llm.offline_responder`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from openai import AsyncOpenAI
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.services.openai.llm import OpenAILLMService

from agent.llm.clients import shared_openai_client
from agent.llm.offline_responder import OfflineResponder

__all__ = [
    "OfflineResponder",
    "OpenAICompatibleLLMService",
    "conversation_context",
]


class OpenAICompatibleLLMService(OpenAILLMService):
    """Pipecat's OpenAI chat service, made safe for self-hosted OpenAI-compatible servers,
    with one client per server shared by all calls (:mod:`agent.llm.clients`)."""

    supports_developer_role = False

    def create_client(  # type: ignore[override]
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        organization: str | None = None,
        project: str | None = None,
        default_headers: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> AsyncOpenAI:
        return shared_openai_client(
            api_key=api_key,
            base_url=base_url,
            organization=organization,
            project=project,
            default_headers=default_headers,
        )


def conversation_context(tools: Sequence[FunctionSchema] = ()) -> LLMContext:
    """A fresh, empty conversation for one call, advertising ``tools`` if any."""
    if tools:
        return LLMContext(messages=[], tools=ToolsSchema(standard_tools=list(tools)))
    return LLMContext(messages=[])
