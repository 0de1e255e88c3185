"""What machine a bench ran on, in one line for its report.

Figures from two machines are not comparable without it: the recognizer's timing and even its
words differ between CTranslate2's backends (Intel MKL on Intel CPUs, oneDNN elsewhere, unless
``CT2_USE_MKL`` forces one), and the CPU model sets every stage's speed.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name as the kernel reports it (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def ctranslate2_backend(environ: dict[str, str] | None = None) -> str:
    """The int8 GEMM backend the offline recognizer runs on with this environment: what
    ``CT2_USE_MKL`` says, else oneDNN, which ``agent.local.recognizer`` pins on every CPU."""
    env = os.environ if environ is None else environ
    forced = env.get("CT2_USE_MKL")
    if forced is None:
        return "oneDNN (the recognizer's default)"
    mkl = forced.strip().lower() in {"1", "true"}
    return f"{'Intel MKL' if mkl else 'oneDNN'} (CT2_USE_MKL={forced})"


def describe(environ: dict[str, str] | None = None) -> str:
    """``CPU model, N cores, CTranslate2 backend``, for a report's header."""
    return (
        f"{cpu_model()}, {os.cpu_count()} core(s), CTranslate2 backend "
        f"{ctranslate2_backend(environ)}"
    )
