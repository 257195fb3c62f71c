"""Tempest judges a server reached from outside: its smoke-tagged scenario tests pass
(issue 33: `make test` runs them; the whole scenario set is `make tempest SCENARIO=1`).

`make tempest SCENARIO=1 SMOKE=1` as a test: tools/tempest_run starts the scenario cloud
of its own (tools/tempest_run/scenario.py: two netns hypervisor hosts with real TCG guests,
the outside namespace on the external network `public`), runs Tempest in the outside
namespace and stops it all. Tempest's own steps are the proof: it makes a network, a
router and a floating IP through Neutron, boots the test guest through our compute API,
logs in with its key pair over SSH from outside and checks what it sees
(`test_server_basic_ops`, `test_network_basic_ops`), and has the admin boot a server on
each host (`test_server_multinode`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tempest import run_tempest

MUST_PASS = ("test_server_basic_ops.TestServerBasicOps.test_server_basic_ops",
             "test_network_basic_ops.TestNetworkBasicOps.test_network_basic_ops",
             "test_server_multinode.TestServerMultinode.test_schedule_to_all_nodes")


@pytest.fixture(autouse=True)
def tempest_scenario() -> None:
    """Names this module's worker group (tests/conftest.py's WORKER_GROUPS): real guests
    on hosts of its own, one after another, on a worker of its own."""


pytestmark = [pytest.mark.vm, pytest.mark.timeout(1200)]


def test_tempest_smoke_scenario_tests_reach_servers_from_outside(tmp_path: Path):
    run = run_tempest(tmp_path, "--scenario", "--smoke", timeout=1080)
    assert run.failed == 0, run.report
    assert run.returncode == 0, run.output[-3000:]
    missing = run.missing(MUST_PASS)
    assert not missing, f"not passed: {missing}\n{run.report}"
