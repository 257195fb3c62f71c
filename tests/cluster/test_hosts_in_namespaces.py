"""Three compute hosts, each in its own network namespace, reach the etcd cluster and
Placement over the bridge. One is cut off (its cable pulled: no resets, packets just
vanish) and comes back.

The host cut off ("far") is made the most attractive one (the most free capacity, and
host_subset_size 1), and a request before the cut lands on it: so requests landing
elsewhere during the cut show the scheduler leaving it out, not chance.

Specs for it are written *after* the cut: it cannot have seen them before, and while
cut it does not (no record appears), so when they end ACTIVE, each built once by the
same daemon run, they were delivered when it returned, exactly once. (Written just
before the cut, they might as well have arrived before it, and prove nothing.)
"""

from __future__ import annotations

import time

import pytest

from tests.cluster.conftest import HEARTBEAT_TTL
from tests.cluster.helpers import build_faults, building_at, rp_of, wait_alive
from tests.compute.helpers import (
    build_events,
    claim_and_send,
    make_spec,
    record_entry,
    wait_state,
)
from tests.support import wait_for

pytestmark = pytest.mark.cluster

BIG = {"VCPU": 32, "MEMORY_MB": 16384, "DISK_GB": 200}
SMALL = {"VCPU": 8, "MEMORY_MB": 4096, "DISK_GB": 50}
QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"
# etcd checks lease expiry every 500 ms and revokes through raft; sampling every 0.1 s.
LAPSE_MARGIN = 2.0


def hosts_table(run) -> dict[str, list[str]]:
    """`schedule.py hosts` (text): the words of each host's row, by host name."""
    lines = run.stdout.splitlines()
    assert lines and lines[0].split()[:3] == ["NAME", "UUID", "ALIVE"], run.stdout
    return {line.split()[0]: line.split() for line in lines[1:]}


def test_a_host_cut_off_lapses_is_left_out_and_gets_its_specs_once_back(
        cluster, cluster_net, make_host, start_daemon, ops_store, ops_placement,
        schedule_cli, figures):
    tag = cluster_net.id[:4] + str(int(time.time() * 1000) % 10000)
    names = [f"far{tag}", f"near{tag}a", f"near{tag}b"]
    configs = [make_host(names[0], inventory=BIG)] + \
        [make_host(name, inventory=SMALL) for name in names[1:]]
    spaces = [cluster_net.add_host(f"h{tag}{i}") for i in range(3)]
    daemons = [start_daemon(config, host=space) for config, space in zip(configs, spaces,
                                                                          strict=True)]
    rps = [rp_of(config) for config in configs]
    for rp in rps:
        wait_alive(ops_store, rp, timeout=60)
    far, far_rp, far_space = daemons[0], rps[0], spaces[0]
    providers_before = {p["uuid"] for p in ops_placement.list_providers()}
    assert providers_before == set(rps)

    # Before the cut the far host wins: it has the most room.
    run, _ = schedule_cli(QUERY, "--json")
    assert run.code == 0, run.stderr
    (control,) = run.json()["instances"]
    assert control["host"] == far_rp, control
    wait_state(ops_store, control["uuid"], "ACTIVE", timeout=30)

    cut_at = time.time()
    cluster_net.cut(far_space)
    sent = [make_spec(far_rp) for _ in range(3)]
    for spec in sent:
        claim_and_send(ops_store, ops_placement, spec)
    wait_for(lambda: ops_store.get(ops_store.keys.alive(far_rp)) is None,
             HEARTBEAT_TTL + LAPSE_MARGIN + 3, interval=0.1, what="the far host's heartbeat "
             "to lapse")
    lapse_s = time.time() - cut_at

    table = hosts_table(schedule_cli("hosts")[0])
    placed, _ = schedule_cli(QUERY, "--count", "4", "--json")
    assert placed.code == 0, placed.stderr
    landed = [d["host"] for d in placed.json()["instances"]]
    undelivered = [s["uuid"] for s in sent if record_entry(ops_store, s["uuid"]) is not None]
    cut_s = time.time() - cut_at

    rejoined_at = time.time()
    cluster_net.rejoin(far_space)
    wait_alive(ops_store, far_rp, timeout=30)
    realive_s = time.time() - rejoined_at
    for spec in sent:
        wait_state(ops_store, spec["uuid"], "ACTIVE", timeout=60)
    delivered_s = max(building_at(ops_store, s["uuid"]) for s in sent) - rejoined_at
    for destination in placed.json()["instances"]:
        wait_state(ops_store, destination["uuid"], "ACTIVE", timeout=30)
    faults = build_faults(configs[0], {s["uuid"] for s in sent} | {control["uuid"]})
    providers_after = [p["uuid"] for p in ops_placement.list_providers()]
    table_after = hosts_table(schedule_cli("hosts")[0])
    figures(lapse_s=round(lapse_s, 3), heartbeat_ttl=HEARTBEAT_TTL, cut_s=round(cut_s, 3),
            realive_s=round(realive_s, 3), delivered_s=round(delivered_s, 3),
            specs_sent_while_cut=len(sent), specs_lost=len(faults["never_built"]),
            built_twice=len(faults["built_twice"]),
            started_twice=len(faults["started_twice"]),
            landed_on_cut_host=landed.count(far_rp))

    assert lapse_s <= HEARTBEAT_TTL + LAPSE_MARGIN, f"heartbeat lapsed after {lapse_s:.1f} s"
    assert table[names[0]][2] == "NO", table
    assert table[names[1]][2] == table[names[2]][2] == "yes", table
    assert far_rp not in landed and set(landed) <= set(rps[1:]), landed
    assert not undelivered, f"specs reached the host while it was cut off: {undelivered}"
    assert faults == {"never_built": [], "built_twice": {}, "started_twice": {}}, faults
    # The same daemon run all along, its provider the same one, no new provider.
    assert all(daemon.alive() for daemon in daemons), far.log()[-2000:]
    starts = {e.daemon for e in build_events(configs[0]) if e.event == "start"}
    assert len(starts) == 1, f"the far host's builds came from {len(starts)} daemon runs"
    assert sorted(providers_after) == sorted(providers_before)
    assert table_after[names[0]][2] == "yes", table_after

