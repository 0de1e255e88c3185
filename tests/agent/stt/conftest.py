"""Fixtures for talking to the local SageMaker runtime stand-in through the real AWS SDK."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.stt.sagemaker import ENDPOINT_URL_ENV
from tests.fakes.sagemaker_runtime import LoopbackTLS, make_loopback_tls


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> LoopbackTLS:
    """A CA and a 127.0.0.1 certificate made with openssl (the SDK speaks HTTP/2 over TLS only)."""
    return make_loopback_tls(Path(tmp_path_factory.mktemp("sagemaker-tls")))


@pytest.fixture
def aws_environment(tls: LoopbackTLS, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Trust the test CA; dummy credentials; no real AWS profile or endpoint can leak in."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca_file))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv(ENDPOINT_URL_ENV, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
