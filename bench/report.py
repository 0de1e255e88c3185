"""How a bench hands over its report: printed, and written to its results file unless the run
was only a look (``--no-write``)."""

from __future__ import annotations

import sys
from pathlib import Path


def publish(report: str, to: Path | None) -> None:
    """Print ``report``; with ``to``, also write it there (UTF-8) and say so on stderr."""
    print(report)
    if to is not None:
        to.write_text(report, encoding="utf-8")
        print(f"written to {to}", file=sys.stderr)
