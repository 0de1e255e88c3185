"""The fast path mirrors Pipecat internals of one version: a different Pipecat fails here,
by name, before anything subtler breaks."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from agent.fastpath import CHECKED_AGAINST as FASTPATH_CHECKED


@pytest.mark.parametrize("distribution", sorted(FASTPATH_CHECKED))
def test_the_installed_pipecat_is_the_one_agent_fastpath_was_checked_against(
    distribution: str,
) -> None:
    installed, checked = version(distribution), FASTPATH_CHECKED[distribution]
    assert installed == checked, (
        f"agent.fastpath mirrors {distribution} {checked} internals, but {installed} is "
        "installed: re-read the upstream code each module of agent/fastpath names, rerun "
        "tests/agent/fastpath, then update agent.fastpath.CHECKED_AGAINST"
    )


def test_the_sagemaker_channels_transport_matches_the_installed_smithy_http() -> None:
    sagemaker = pytest.importorskip("agent.stt.sagemaker")
    for distribution, checked in sagemaker.CHECKED_AGAINST.items():
        installed = version(distribution)
        assert installed == checked, (
            f"agent.stt.sagemaker._CRTTransport mirrors {distribution} {checked} internals, but "
            f"{installed} is installed: re-read smithy_http.aio.crt and awscrt/http.py, rerun "
            "tests/agent/stt/test_sagemaker*.py, then update its CHECKED_AGAINST"
        )
