"""The etcd leader is killed (SIGKILL) while specs flow to a host.

The member the host's client talks to is made the leader first (etcd's MoveLeader), so
the host always loses its own member, not just the cluster its leader. What is
measured, from the kill (wall clock):

- election_s: until the two survivors agree on a new leader;
- watch_resume_s: until the first spec *written after the kill* (its write acknowledged
  after it) is BUILDING on the host: the host's watch (or its resubscription) delivered
  it and the host wrote its record. It includes the writer's own wait for the cluster
  (written_s) and the host's part (delivery_s = BUILDING - written);
- heartbeat_resume_s: until the host's first successful lease keep-alive after the kill
  (its DEBUG line "heartbeat: lease ... refreshed");
- lapses: samples (every 0.1 s, from just before the kill to 3 TTLs after it) in which
  /alive/<rp> was gone or held by another lease. There must be none: the lease outlives
  an election.
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import HEARTBEAT_TTL
from tests.cluster.helpers import (
    AliveSampler,
    Writer,
    build_faults,
    building_at,
    etcd_peers,
    log_times,
    rp_of,
    wait_alive,
)
from tests.compute.helpers import make_spec, wait_state
from tests.support import wait_for

pytestmark = pytest.mark.cluster

SPECS, KILL_AFTER, INTERVAL = 48, 16, 0.08


def test_leader_kill_while_specs_flow_loses_nothing_and_builds_nothing_twice(
        cluster, make_host, start_daemon, ops_store, ops_placement, ops_etcd, figures):
    config = make_host("leaderkill")
    rp = rp_of(config)
    compute = start_daemon(config)
    wait_alive(ops_store, rp)
    lease = ops_store.get(ops_store.keys.alive(rp)).lease
    specs = [make_spec(rp) for _ in range(SPECS)]
    writer = Writer(ops_store, ops_placement, specs, INTERVAL)
    sampler = AliveSampler(ops_etcd, rp)
    # The worst case, every time: the member the host talks to is the leader killed.
    (peer,) = wait_for(lambda: etcd_peers(compute.pid, cluster.endpoints), 10,
                       what="the host's connection to etcd")
    leader = next(m for m in cluster.members if m.endpoint == peer)
    cluster.move_leader(leader)

    writer.start()
    wait_for(lambda: len(writer.written) >= KILL_AFTER, 30, what="the first specs written")
    sampler.start()
    time.sleep(0.3)  # samples from before the kill too
    on_leader = etcd_peers(compute.pid, cluster.endpoints) == [leader.endpoint]
    killed_at = time.time()
    cluster.kill(leader)
    new_leader = cluster.leader(timeout=20)
    election_s = time.time() - killed_at
    assert new_leader is not leader

    writer.join(60)
    assert not writer.is_alive() and writer.error is None, writer.error
    active = {}
    for spec in specs:
        active[spec["uuid"]] = wait_state(ops_store, spec["uuid"], "ACTIVE", timeout=60)
    time.sleep(max(0.0, killed_at + 3 * HEARTBEAT_TTL - time.time()))
    sampler.stop()

    after = sorted((t, uuid) for uuid, t in writer.written.items() if t > killed_at)
    assert after, "every spec was written before the kill: the stream was too short"
    written, first = after[0]
    building = building_at(ops_store, first)
    log = compute.log()
    refreshed = [t for t in log_times(log, "heartbeat: lease") if t > killed_at]
    lapses = sampler.lapses(lease)
    faults = build_faults(config, set(active))
    figures(
        election_s=round(election_s, 3), watch_resume_s=round(building - killed_at, 3),
        written_s=round(written - killed_at, 3), delivery_s=round(building - written, 3),
        heartbeat_resume_s=round(refreshed[0] - killed_at, 3) if refreshed else None,
        lease_lapsed=bool(lapses), lapse_samples=len(lapses),
        alive_samples=len(sampler.samples), alive_failed_reads=sampler.failed_reads,
        failed_writes=writer.failed_writes, specs=len(specs),
        specs_lost=len(faults["never_built"]), built_twice=len(faults["built_twice"]),
        started_twice=len(faults["started_twice"]), host_was_on_leader=on_leader,
        killed=leader.name,
        new_leader=new_leader.name)

    # Nothing lost, nothing built twice, the host never restarted.
    assert faults == {"never_built": [], "built_twice": {}, "started_twice": {}}, faults
    assert compute.alive(), log[-2000:]
    # The heartbeat went on through the election: refreshed after it, never lapsed.
    assert refreshed, "no heartbeat refresh after the kill"
    assert "heartbeat lease expired" not in log
    assert sampler.samples and sampler.samples[0][0] < killed_at < sampler.samples[-1][0]
    assert not lapses, (f"/alive/{rp} lapsed after the leader kill: "
                        f"{[(round(at - killed_at, 2), held) for at, held in lapses[:5]]}")

    # The killed member comes back as itself and the cluster is whole again.
    cluster.restart(leader)
    cluster.wait_whole()
