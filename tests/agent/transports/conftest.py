"""The ``carrier`` fixture: a telephony test that holds for every carrier runs once for each."""

from __future__ import annotations

import pytest

from tests.agent.transports.carriers import CARRIERS, Carrier


@pytest.fixture(params=CARRIERS, ids=lambda carrier: carrier.name)
def carrier(request: pytest.FixtureRequest) -> Carrier:
    carrier: Carrier = request.param
    return carrier
