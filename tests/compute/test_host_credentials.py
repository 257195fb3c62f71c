"""What a compute host's credentials reach: its own keys, and nothing of another host's.

Real etcd with TLS client certificates and RBAC, real Placement requiring a client
certificate (tests/conftest.py). A host may read and write only under its own
`/hosts/<rp>/`, its `/alive/<rp>` and `/stats/<rp>`, and read the controller's
leader key and its own maintenance key: it cannot read another host's specs,
write another host's keys, move an instance (that is the controller's, with the
operator's rights), nor disable itself out of maintenance.
"""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.etcd_connection import PermissionDenied
from etcd_compute.instances import moves, records, scheduling
from etcd_compute.placement import PlacementClient
from tests.support import make_spec


@pytest.fixture
def two_hosts(host_credentials):
    a, b = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    return (a, host_credentials(a)), (b, host_credentials(b))


def test_a_host_reads_and_writes_only_its_own_keys(two_hosts, store, placement):
    (a, a_creds), (b, _) = two_hosts
    spec_b = make_spec(b)
    scheduling.schedule(store, [(spec_b, "host-b")])  # the operator's side places it on b
    with Store(a_creds["etcd"]) as host_a:
        # Its own prefix, heartbeat and stats: fine.
        host_a.put(messages.INSTANCE_SPEC, host_a.keys.spec(a, spec_b["uuid"]),
                   {**spec_b, "host": a})
        assert host_a.get(host_a.keys.spec(a, spec_b["uuid"])) is not None
        host_a.put(messages.ALIVE, host_a.keys.alive(a), {"host": a, "name": "a", "since": 1.0})
        assert host_a.get(host_a.keys.leader()) is None  # readable (no leader here)
        assert host_a.get(host_a.keys.maintenance(a)) is None
        # Anything of b's, and the operator's keys: refused by etcd, one line each.
        refused = [
            lambda: host_a.get(host_a.keys.spec(b, spec_b["uuid"])),
            lambda: host_a.get_prefix(host_a.keys.host(b)),
            lambda: host_a.put(messages.INSTANCE_SPEC, host_a.keys.spec(b, spec_b["uuid"]),
                               {**spec_b, "action": "destroy"}),
            lambda: host_a.delete(host_a.keys.record(b, spec_b["uuid"])),
            lambda: host_a.put(messages.ALIVE, host_a.keys.alive(b),
                               {"host": b, "name": "b", "since": 1.0}),
            lambda: host_a.get(host_a.keys.location(spec_b["uuid"])),
            lambda: host_a.delete(host_a.keys.maintenance(a)),  # out of maintenance
            lambda: host_a.put(messages.CONTROLLER_LEADER, host_a.keys.leader(),
                               {"name": "a", "since": 1.0}),
        ]
        for attempt in refused:
            with pytest.raises(PermissionDenied) as caught:
                attempt()
            assert "PERMISSION_DENIED" in str(caught.value)
            assert "\n" not in str(caught.value)
        # Nor can it move b's instance to itself: the controller's transaction, refused
        # whole (nothing of it is applied).
        read = records.read_record(store, b, spec_b["uuid"])
        with pytest.raises(PermissionDenied):
            moves.evacuate(host_a, spec_b, read, a, {a: {"resources": spec_b["resources"]}})
    assert records.locate(store, spec_b["uuid"])["host"] == b
    assert store.get(store.keys.spec(b, spec_b["uuid"])) is not None


def test_no_certificate_reaches_neither_etcd_nor_placement(two_hosts):
    (_, creds), _ = two_hosts
    etcd = {k: v for k, v in creds["etcd"].items() if k not in ("cert", "key")}
    with pytest.raises(EtcdComputeError) as caught:
        with Store({**etcd, "timeout": 3.0}) as anonymous:
            anonymous.get("/anything")
    assert "\n" not in str(caught.value)
    placement = {k: v for k, v in creds["placement"].items() if k not in ("cert", "key")}
    with pytest.raises(ServiceUnavailable) as caught:
        PlacementClient({**placement, "timeout": 3.0}).list_providers()
    assert "\n" not in str(caught.value)


def test_a_certificate_from_another_ca_reaches_neither_etcd_nor_placement(two_hosts, tmp_path):
    """Same CN as a real host, trusting the right CA for the servers: refused by both."""
    from etcd_compute.pki import COMPUTE, Pki, compute_name

    (a, creds), _ = two_hosts
    stranger = Pki(tmp_path / "stranger")
    stranger.init("another cluster")
    forged = stranger.issue(compute_name(a), COMPUTE)
    swap = {"cert": str(forged.cert), "key": str(forged.key), "timeout": 3.0}
    with pytest.raises(EtcdComputeError) as caught:
        with Store({**creds["etcd"], **swap}) as impostor:
            impostor.get(impostor.keys.alive(a))
    assert "TLS handshake failed" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ServiceUnavailable) as caught:
        PlacementClient({**creds["placement"], **swap}).list_providers()
    assert "TLS handshake failed" in str(caught.value) and "\n" not in str(caught.value)
