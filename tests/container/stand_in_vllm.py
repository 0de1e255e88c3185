"""A stand-in for the ``vllm`` command, for running the real entrypoint without a GPU.

Invoked as ``vllm serve MODEL --host H --port P ...``: records its argv and a few
environment variables (JSON), its pid, and every ``/health`` request it answers, then serves
``GET /health`` on H:P: 503 while ``FAKE_VLLM_READY_FILE`` names a file that doesn't exist
yet, else 200. ``FAKE_VLLM_EXIT_CODE`` makes it exit at once with that code instead. SIGTERM
ends it with code 0 after writing ``terminated`` to ``FAKE_VLLM_STATE_DIR/terminated``.

Standard library only: the test runs it with the same interpreter as itself.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import FrameType

RECORDED_ENV = ("VLLM_DISABLE_COMPILE_CACHE", "PYTHONPATH")


def main() -> int:
    state = Path(os.environ["FAKE_VLLM_STATE_DIR"])
    argv = sys.argv[1:]
    (state / "argv.json").write_text(
        json.dumps({"argv": argv, "env": {k: os.environ.get(k) for k in RECORDED_ENV}})
    )
    (state / "pid").write_text(str(os.getpid()))
    exit_code = os.environ.get("FAKE_VLLM_EXIT_CODE")
    if exit_code:
        return int(exit_code)

    ready_file = os.environ.get("FAKE_VLLM_READY_FILE")
    host = argv[argv.index("--host") + 1]
    port = int(argv[argv.index("--port") + 1])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            ready = ready_file is None or Path(ready_file).exists()
            status = 200 if self.path == "/health" and ready else 503
            if self.path != "/health":
                status = 404
            with (state / "health.log").open("a") as log:
                log.write(f"{status}\n")
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    def terminate(signum: int, frame: FrameType | None) -> None:
        (state / "terminated").write_text("terminated")
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, terminate)
    server = HTTPServer((host, port), Handler)
    print(f"stand-in vllm listening on {host}:{port}", file=sys.stderr, flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
