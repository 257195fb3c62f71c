"""Two of three etcd members die: no quorum. Commands fail fast, the host holds on, and
everything written before the loss completes once the members are back.

Before the loss: one instance is ACTIVE (for the commands to ask about), and a batch of
specs has just been written to a host whose builds take 1.5 s with 2 workers: when the
members die, two are mid-build (their ACTIVE write cannot happen) and the rest wait in
the host (their BUILDING write cannot happen either). Every command then must exit 3
with one line naming etcd, within about the configured etcd timeout; none may change
anything (the scheduling command claims nothing in Placement, the destroy destroys
nothing). Once the two members are back, every spec ends ACTIVE, each built once.
"""

from __future__ import annotations

import json
import time

import pytest

from etcd_compute.etcd import Store
from tests.cluster.conftest import ETCD_TIMEOUT, HEARTBEAT_TTL
from tests.cluster.helpers import build_faults, rp_of, wait_alive
from tests.compute.helpers import build_events, claim_and_send, make_spec, wait_state

pytestmark = pytest.mark.cluster

QUERY = "resources=VCPU:1,MEMORY_MB:64,DISK_GB:1"
# On top of what the same command takes with etcd up (Python's start and imports, slow on
# a busy 2-core machine). A call's tries stop at half the timeout and the last may wait a
# whole one (etcd.Store._rpc); yet loaded fresh-clone CI runs measured commands at 1.1-2.7
# timeouts (2.2-5.4 s with 2 s) once this process started in 0.2-0.5 s, not the ~1 s of
# recompiling every module it had before: where the rest goes is not found yet (issue 18).
# So: two timeouts and the slack; a command that hangs on a member still fails this.
SLACK = 1.5
TIMEOUTS = 2


def written(store: Store, rp: str, uuid: str) -> dict[str, tuple[int, str]]:
    """The revision that last wrote `uuid`'s spec and record, and what they say."""
    spec = store.get(store.keys.spec(rp, uuid))
    record = store.get(store.keys.record(rp, uuid))
    assert spec is not None and record is not None, (spec, record)
    return {"spec": (spec.mod_revision, json.loads(spec.value)["action"]),
            "record": (record.mod_revision, json.loads(record.value)["state"])}


# Timed against a 3-member cluster's elections on a shared 2-core machine, as its sibling in
# test_service_through_etcd_failures.py.
@pytest.mark.flaky(reruns=1)
def test_lost_quorum_fails_commands_fast_and_loses_nothing(
        cluster, make_host, start_daemon, ops_store, ops_placement, schedule_cli, figures):
    config = make_host("quorum", build_seconds=1.5, workers=2)
    rp = rp_of(config)
    compute = start_daemon(config)
    wait_alive(ops_store, rp)
    known = make_spec(rp)
    claim_and_send(ops_store, ops_placement, known)
    wait_state(ops_store, known["uuid"], "ACTIVE", timeout=30)
    baselines = [schedule_cli("list") for _ in range(2)]
    for baseline, _ in baselines:
        assert baseline.code == 0 and known["uuid"] in baseline.stdout, baseline
    baseline_s = max(seconds for _, seconds in baselines)

    pending = [make_spec(rp) for _ in range(5)]
    for spec in pending:
        claim_and_send(ops_store, ops_placement, spec)
    wait_state(ops_store, pending[0]["uuid"], "BUILDING", timeout=30)
    usage = ops_placement.get_usages(rp)
    untouched = written(ops_store, rp, known["uuid"])
    leader = cluster.leader()
    victims = [leader, next(m for m in cluster.members if m is not leader)]
    lost_at = time.time()
    for member in victims:
        cluster.kill(member)

    commands = {"query": [QUERY], "show": [known["uuid"]], "list": ["list"],
                "hosts": ["hosts"], "destroy": ["destroy", known["uuid"]],
                "console": ["console", known["uuid"]]}
    runs = {name: schedule_cli(*args, timeout=60) for name, args in commands.items()}
    # Past a lease TTL without quorum: the host must still be there afterwards.
    time.sleep(max(0.0, lost_at + HEARTBEAT_TTL + 1 - time.time()))
    host_survived = compute.alive()

    back_at = time.time()
    for member in victims:
        cluster.restart(member)
    cluster.wait_whole()
    records = {s["uuid"]: wait_state(ops_store, s["uuid"], "ACTIVE", timeout=60)
               for s in pending}
    faults = build_faults(config, {s["uuid"] for s in pending} | {known["uuid"]})
    # Which of them the driver finished only after the members died (the log's times).
    late = {e.uuid for e in build_events(config) if e.event == "built" and e.at > lost_at}
    figures(
        cli_s={name: round(seconds, 3) for name, (_, seconds) in runs.items()},
        cli_baseline_s=round(baseline_s, 3), etcd_timeout_s=ETCD_TIMEOUT,
        recovered_s=round(max(r["updated_at"] for r in records.values()) - back_at, 3),
        quorum_lost_s=round(back_at - lost_at, 3), specs=len(pending),
        specs_lost=len(faults["never_built"]), built_twice=len(faults["built_twice"]),
        started_twice=len(faults["started_twice"]),
        built_after_loss=len(late & {s["uuid"] for s in pending}))

    for name, (run, seconds) in runs.items():
        lines = run.stderr.strip().splitlines()
        assert run.code == 3, f"{name}: exit {run.code}: {run.stderr[-500:]}"
        assert len(lines) == 1 and lines[0].startswith("schedule.py: error: etcd at "), \
            f"{name}: {run.stderr[-500:]}"
        assert "unreachable" in lines[0] or "unavailable" in lines[0], f"{name}: {lines[0]}"
        assert seconds <= baseline_s + TIMEOUTS * ETCD_TIMEOUT + SLACK, \
            f"{name} took {seconds:.1f} s"
    assert late & {s["uuid"] for s in pending}, "every spec was built before the loss"
    assert host_survived, compute.log()[-2000:]
    assert compute.alive(), compute.log()[-2000:]
    assert faults == {"never_built": [], "built_twice": {}, "started_twice": {}}, faults
    # The commands changed nothing: no claim from the query; no destroy of `known`, then or
    # once the members were back (its spec and record are the very writes from before).
    assert ops_placement.get_usages(rp) == usage
    assert written(ops_store, rp, known["uuid"]) == untouched
