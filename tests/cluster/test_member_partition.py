"""The etcd member a host talks to is cut off the network (not killed: no reset ever
reaches the host, its connection just goes silent), while the two others go on.

The host's calls to it time out and move to another member; its watch stream has no
timeout and would wait on the silent connection for ever, unless gRPC's keepalive pings
notice the member is gone. A spec written after the cut must still be delivered and
built once; the heartbeat must go on through another member.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import HEARTBEAT_TTL
from tests.cluster.helpers import (
    AliveSampler,
    build_faults,
    building_at,
    etcd_peers,
    rp_of,
    send_until_written,
    wait_alive,
)
from tests.compute.helpers import claim_and_send, make_spec, wait_state
from tests.support import wait_for

pytestmark = pytest.mark.cluster

# gRPC pings every 10 s and gives up on a silent member 5 s later (etcd_connection.GRPC_OPTIONS).
KEEPALIVE_S = 15


def test_a_silent_member_does_not_hold_the_hosts_watch(
        cluster, cluster_net, make_host, start_daemon, ops_store, ops_placement, ops_etcd,
        figures):
    config = make_host("silent")
    rp = rp_of(config)
    compute = start_daemon(config)
    wait_alive(ops_store, rp)
    lease = ops_store.get(ops_store.keys.alive(rp)).lease
    # A spec built first: the host's watch is up on its member before that goes silent.
    first = make_spec(rp)
    claim_and_send(ops_store, ops_placement, first)
    wait_state(ops_store, first["uuid"], "ACTIVE", timeout=30)
    (peer,) = wait_for(lambda: etcd_peers(compute.pid, cluster.endpoints), 10,
                       what="the host's connection to etcd")
    member = next(m for m in cluster.members if m.endpoint == peer)
    sampler = AliveSampler(ops_etcd, rp)
    sampler.start()
    time.sleep(0.3)

    cut_at = time.time()
    cluster_net.cut(cluster.hosts[member.name])
    try:
        spec = make_spec(rp)
        failed_writes = send_until_written(ops_store, ops_placement, spec)
        written_at = time.time()
        wait_state(ops_store, spec["uuid"], "ACTIVE", timeout=KEEPALIVE_S + 30)
        building = building_at(ops_store, spec["uuid"])
        time.sleep(max(0.0, cut_at + 3 * HEARTBEAT_TTL - time.time()))
        sampler.stop()
    finally:
        cluster_net.rejoin(cluster.hosts[member.name])
    lapses = sampler.lapses(lease)
    faults = build_faults(config, {first["uuid"], spec["uuid"]})
    figures(delivery_s=round(building - written_at, 3), written_s=round(written_at - cut_at, 3),
            failed_writes=failed_writes, lease_lapsed=bool(lapses),
            lapse_samples=len(lapses), alive_samples=len(sampler.samples),
            built_twice=len(faults["built_twice"]), cut_member=member.name)

    assert faults == {"never_built": [], "built_twice": {}, "started_twice": {}}, faults
    assert building - written_at <= KEEPALIVE_S + 5, "the watch waited on the silent member"
    assert not lapses, f"/alive/{rp} lapsed: {[round(at - cut_at, 2) for at, _ in lapses[:5]]}"
    assert compute.alive(), compute.log()[-2000:]
    cluster.wait_whole()
