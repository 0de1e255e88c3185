"""HAProxy in front of agent replicas, configured from the same facts as the Kubernetes
manifests: the readiness probe (path, period, timeout, thresholds) becomes HAProxy's health
check, the Ingress's affinity cookie becomes HAProxy's, its WebSocket timeouts its tunnel
timeout. A real ``haproxy`` process (Debian package, installed by ``scripts/setup.sh``).
"""

from __future__ import annotations

import csv
import io
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.manifests import container, find, ingress_paths

INGRESS = "nginx.ingress.kubernetes.io/"


@dataclass(frozen=True)
class BalancerFacts:
    """What a load balancer must know about the agent, as the manifests say it."""

    readiness_path: str
    check_interval_s: int
    check_timeout_s: int
    fall: int
    rise: int
    affinity_cookie: str
    tunnel_timeout_s: int
    public_paths: list[tuple[str, str]]
    settings_env: dict[str, str]

    @classmethod
    def from_manifests(cls, resources: list[dict[str, Any]]) -> BalancerFacts:
        probe = container(find(resources, "Deployment", "voice-agent"), "server")["readinessProbe"]
        ingress = find(resources, "Ingress", "voice-agent")
        notes = ingress["metadata"]["annotations"]
        assert notes[INGRESS + "affinity"] == "cookie"
        return cls(
            readiness_path=probe["httpGet"]["path"],
            check_interval_s=probe["periodSeconds"],
            check_timeout_s=probe["timeoutSeconds"],
            fall=probe["failureThreshold"],
            rise=probe["successThreshold"],
            affinity_cookie=notes[INGRESS + "session-cookie-name"],
            tunnel_timeout_s=int(notes[INGRESS + "proxy-read-timeout"]),
            public_paths=ingress_paths(ingress),
            settings_env=dict(find(resources, "ConfigMap", "voice-agent-settings")["data"]),
        )


def haproxy_config(
    facts: BalancerFacts,
    *,
    port: int,
    replicas: dict[str, int],
    stats_socket: Path,
    source: str | None = None,
) -> str:
    """The config: ``replicas`` maps a server name (also its cookie value) to its port.

    ``source``: the address HAProxy connects to the replicas from (another loopback address
    stands in for the ingress controller's pod address, which is not the client's).

    ``option persist``: a request whose cookie names a replica that left the pool (draining,
    or full) still goes there, so a WebRTC session's follow-ups reach the peer connection that
    only that process holds; ``option redispatch``: unless that replica is gone altogether.
    """
    public = []  # the Ingress's paths: Exact is the path; Prefix, whole path elements
    for path, kind in facts.public_paths:
        public.append(f"    acl public path {path}")
        if kind == "Prefix":
            public.append(f"    acl public path_beg {path.rstrip('/')}/")
    acls = "\n".join(public)
    from_source = f" source {source}" if source else ""
    servers = "\n".join(
        f"    server {name} 127.0.0.1:{replica_port}{from_source} check cookie {name}"
        for name, replica_port in replicas.items()
    )
    return f"""\
global
    stats socket {stats_socket} mode 600 level admin
    maxconn 4096

defaults
    mode http
    log global
    timeout connect 2s
    timeout client 30s
    timeout server 30s
    timeout http-request 10s
    timeout tunnel {facts.tunnel_timeout_s}s
    timeout check {facts.check_timeout_s}s
    option redispatch

frontend calls
    bind 127.0.0.1:{port}
    option forwardfor
{acls}
    http-request deny deny_status 404 unless public
    default_backend agents

backend agents
    balance roundrobin
    option httpchk GET {facts.readiness_path}
    http-check expect status 200
    cookie {facts.affinity_cookie} insert indirect nocache httponly
    option persist
    default-server inter {facts.check_interval_s}s fall {facts.fall} rise {facts.rise}
{servers}
"""


class HAProxy:
    """``haproxy -db`` (foreground) with a generated config; its stats socket tells which
    servers are in the pool. Use as a context manager: the process is always stopped."""

    def __init__(self, config: str, workdir: Path, stats_socket: Path) -> None:
        binary = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/sbin")
        if binary is None:
            pytest.fail("haproxy is missing: run scripts/setup.sh as root (it apt-get installs it)")
        self.config_path = workdir / "haproxy.cfg"
        self.config_path.write_text(config)
        self.stats_socket = stats_socket
        self.log = workdir / "haproxy.log"
        check = subprocess.run([binary, "-c", "-f", str(self.config_path)], capture_output=True)
        assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
        self._argv = [binary, "-db", "-f", str(self.config_path)]
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> HAProxy:
        self.process = subprocess.Popen(
            self._argv, stdout=self.log.open("wb"), stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 10
        while not self.stats_socket.exists():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "haproxy never opened its stats socket"
            time.sleep(0.05)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def command(self, line: str) -> str:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.stats_socket))
            sock.sendall(line.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def states(self) -> dict[str, str]:
        """Each replica's state in the pool: ``UP``, ``DOWN``, ``UP 1/2`` (rising) …"""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == "agents" and row["svname"] not in ("BACKEND", "FRONTEND")
        }
