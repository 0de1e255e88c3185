"""The SageMaker runtime stand-in and a realtime container behind it, in a process of their own.

A test can then freeze the whole platform the way a stopped relay or a hung load balancer
does (``SIGSTOP``: the kernel still accepts TCP connections, nothing answers on them), which
an in-process stand-in cannot do without freezing the test itself.

``python -m tests.fakes.sagemaker_process TLS_DIR`` prints ``URL https://127.0.0.1:PORT`` once
serving and runs until killed. ``TLS_DIR`` holds :func:`make_loopback_tls`'s files.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.fakes.realtime_peer import RealtimePeer
from tests.fakes.sagemaker_runtime import CONTAINER_PATH, LoopbackTLS, SageMakerRuntimeStandIn

ENDPOINT = "voxtral"
REGION = "us-east-1"


async def serve(tls_dir: Path) -> None:
    """Serve until cancelled: a peer that answers like vLLM (one delta per 80 ms of audio)."""
    tls = LoopbackTLS(
        ca_file=tls_dir / "ca.pem",
        cert_file=tls_dir / "server.pem",
        key_file=tls_dir / "server.key",
    )
    paths = ("/v1/realtime", CONTAINER_PATH)
    async with RealtimePeer(model=None, deltas="steps", delta_text="x", paths=paths) as peer:
        upstream = peer.url.removesuffix("/v1/realtime")
        async with SageMakerRuntimeStandIn(
            upstream_url=upstream, tls=tls, endpoints=(ENDPOINT,), region=REGION
        ) as runtime:
            print(f"URL {runtime.url}", flush=True)
            await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1])))
