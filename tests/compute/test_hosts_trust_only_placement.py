"""A host acts only on what Placement says it holds, and on keys it owns (real services).

Whoever can write a spec is not trusted: a spec with no claim, a destroy
under the wrong host, a duplicate spec on a second host, resources that
differ from the claim, odd keys and hostile values all end in a refusal with
a reason, never a build, a freed claim of someone else's, or a dead daemon.
"""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.etcd import Store
from tests.compute.helpers import (
    assert_nothing_left,
    build_events,
    claim_and_send,
    fake_instances,
    make_spec,
    record,
    send_destroy,
    wait_state,
    write_as_the_host,
)
from tests.support import wait_for

NESTED = "[" * 50_000 + "]" * 50_000


def rp_of(config):
    return config["compute"]["uuid"]


def started(start_compute, store, config, name="compute"):
    compute = start_compute(config, name=name)
    wait_for(lambda: store.get(store.keys.alive(rp_of(config))), 30, what="heartbeat")
    return compute


def test_a_spec_without_a_claim_is_refused_into_error(start_compute, compute_config, store,
                                                      placement):
    compute = started(start_compute, store, compute_config)
    spec = make_spec(rp_of(compute_config))
    store.put(messages.INSTANCE_SPEC, store.keys.spec(spec["host"], spec["uuid"]), spec)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"] == "refused: Placement holds no claim for this instance"
    assert spec["uuid"] not in fake_instances(compute_config)
    assert store.get(store.keys.spec(spec["host"], spec["uuid"])) is None
    assert compute.alive()


def test_a_spec_whose_resources_differ_from_its_claim_is_refused(start_compute,
                                                                 compute_config, store,
                                                                 placement):
    started(start_compute, store, compute_config)
    spec = make_spec(rp_of(compute_config))
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    bigger = {**spec, "resources": {**spec["resources"], "MEMORY_MB": 2048}}
    store.put(messages.INSTANCE_SPEC, store.keys.spec(spec["host"], spec["uuid"]), bigger)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert "the spec asks for DISK_GB:1,MEMORY_MB:2048,VCPU:1 but Placement holds " \
        "DISK_GB:1,MEMORY_MB:64,VCPU:1 for it here" in failed["error"]
    assert_nothing_left(store, placement, compute_config, spec)


def test_a_destroy_under_the_wrong_host_touches_nothing(start_compute, compute_config,
                                                        host_config, store, placement):
    other = host_config("bystander")
    started(start_compute, store, compute_config)
    bystander = started(start_compute, store, other, name="bystander")
    spec = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    send_destroy(store, {**spec, "host": rp_of(other)})
    wait_for(lambda: store.get(store.keys.spec(rp_of(other), spec["uuid"])) is None, 20,
             what="the bystander to drop the stray destroy")
    assert "refused: destroy of an instance this host does not hold" in bystander.log()
    assert record(store, spec["uuid"])["state"] == "ACTIVE"
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {rp_of(compute_config)}
    assert store.get(store.keys.record(rp_of(other), spec["uuid"])) is None


def test_a_duplicate_spec_on_a_second_host_is_not_built_there(start_compute, compute_config,
                                                              host_config, store, placement):
    other = host_config("second")
    started(start_compute, store, compute_config)
    second = started(start_compute, store, other, name="second")
    spec = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    store.put(messages.INSTANCE_SPEC, store.keys.spec(rp_of(other), spec["uuid"]),
              {**spec, "host": rp_of(other),
               "allocations": {rp_of(other): {"resources": spec["resources"]}}})
    wait_for(lambda: store.get(store.keys.spec(rp_of(other), spec["uuid"])) is None, 20,
             what="the second host to drop the duplicate")
    assert f"claimed on {rp_of(compute_config)}, not on this host" in second.log()
    assert spec["uuid"] not in fake_instances(other)
    assert store.get(store.keys.record(rp_of(other), spec["uuid"])) is None
    assert record(store, spec["uuid"])["state"] == "ACTIVE"
    assert set(placement.get_allocations(spec["uuid"])["allocations"]) == {rp_of(compute_config)}


def test_odd_keys_under_a_host_are_removed_at_start(start_compute, compute_config, store):
    rp = rp_of(compute_config)
    uuid = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"
    odd = [f"{store.keys.host(rp)}specs/{uuid}/extra", f"{store.keys.host(rp)}../{uuid}",
           f"{store.keys.host(rp)}/{uuid}", f"{store.keys.host(rp)}specs/not-a-uuid",
           f"{store.keys.host(rp)}{uuid}"]
    for key in odd:
        store.client.put(key, "{}")
    compute = started(start_compute, store, compute_config)
    wait_for(lambda: all(store.get(key) is None for key in odd), 20, what="odd keys removed")
    assert compute.log().count("not an instance key of ours") == len(odd)


def test_hostile_values_at_every_key_the_daemon_reads(start_compute, compute_config, store,
                                                      placement):
    """~50,000 levels of nesting once raised RecursionError: the daemon died in reconcile
    and the host stayed down until someone deleted the key by hand."""
    rp = rp_of(compute_config)
    # The host was registered before (a restart): its provider exists and holds the claim.
    placement.ensure_provider(rp, compute_config["compute"]["name"])
    placement.set_inventory(rp, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048},
                                 "DISK_GB": {"total": 20}})
    victim = make_spec(rp)
    placement.claim(victim["uuid"], victim["allocations"], "p", "u")
    store.client.put(store.keys.spec(rp, victim["uuid"]), NESTED)
    store.client.put(store.keys.record(rp, victim["uuid"]), NESTED)
    store.client.put(store.keys.stats(rp), NESTED)
    broken_record = make_spec(rp)
    store.client.put(store.keys.record(rp, broken_record["uuid"]), NESTED)
    compute = started(start_compute, store, compute_config)
    failed = wait_state(store, victim["uuid"], "ERROR")
    assert "nested deeper than" in failed["error"]
    assert placement.get_allocations(victim["uuid"])["allocations"] == {}
    # The unreadable record is rewritten by the next honest build of that uuid.
    claim_and_send(store, placement, broken_record)
    wait_state(store, broken_record["uuid"], "ACTIVE")
    # A restart with the hostile stats value still there is clean too.
    assert compute.terminate() == 0
    compute = started(start_compute, store, compute_config)
    good = make_spec(rp)
    claim_and_send(store, placement, good)
    wait_state(store, good["uuid"], "ACTIVE")
    assert "Traceback" not in compute.log() and compute.alive()


def test_a_spec_without_allocations_is_judged_and_the_host_starts_again_with_one(
        start_compute, compute_config, store, placement):
    """The schema leaves `allocations` optional: the host's capacity account read it before
    the spec was judged (KeyError: neither refused nor built), and the next start died in its
    reconcile (exit 1): one such key kept the host down. Written with the host's own
    certificate, as anyone holding it could."""
    rp = rp_of(compute_config)
    compute = started(start_compute, store, compute_config)

    def bare_spec(claimed: bool) -> dict[str, Any]:
        spec = make_spec(rp)
        if claimed:
            placement.claim(spec["uuid"], spec["allocations"], "p", "u")
        del spec["allocations"]
        with Store(compute_config["etcd"]) as as_host:
            as_host.put(messages.INSTANCE_SPEC, as_host.keys.spec(rp, spec["uuid"]), spec)
        return spec

    unclaimed = bare_spec(claimed=False)
    failed = wait_state(store, unclaimed["uuid"], "ERROR")
    assert failed["error"] == "refused: Placement holds no claim for this instance"
    assert compute.terminate() == 0
    # Written while the host is down: its start's reconcile meets them first.
    waiting = [bare_spec(claimed=False), bare_spec(claimed=True)]
    again = started(start_compute, store, compute_config, name="again")
    assert wait_state(store, waiting[0]["uuid"], "ERROR")["error"] == \
        "refused: Placement holds no claim for this instance"
    wait_state(store, waiting[1]["uuid"], "ACTIVE")  # its claim holds: built
    # The account holds what the built one's claim was judged on (the refused are gone).
    wait_for(lambda: (store.read(messages.HOST_STATS, store.keys.stats(rp))[0] or {}).get(
        "capacity", {}).get("used") == waiting[1]["resources"], 10, what="the host's account")
    assert again.alive() and "Traceback" not in again.log() + compute.log()


def test_hostile_values_everywhere_the_cli_reads(start_compute, compute_config, store,
                                                 placement, run_schedule):
    rp = rp_of(compute_config)
    started(start_compute, store, compute_config)
    honest = run_schedule("resources=VCPU:1,MEMORY_MB:64,DISK_GB:1", "--wait", "--json")
    assert honest.code == 0, honest.stderr
    uuid = honest.json()["instances"][0]["uuid"]
    hostile = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"
    for key in (store.keys.record(rp, hostile), store.keys.location(hostile),
                store.keys.alive("1b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"),
                store.keys.stats(rp), store.keys.group_member("g", hostile),
                store.keys.console(rp, uuid), store.keys.leader()):
        store.client.put(key, NESTED)
    # Each command does exactly what it does without them, or fails in one line naming
    # what it could not read; what is unreadable is never shown as if it were something.
    listed = run_schedule("list")
    assert (listed.code, listed.stderr) == (0, ""), listed
    assert uuid in listed.stdout and hostile not in listed.stdout
    hosts = run_schedule("hosts")
    assert (hosts.code, hosts.stderr) == (0, ""), hosts
    assert [line.split()[1] for line in hosts.stdout.splitlines()[1:]] == [rp]
    shown = run_schedule(uuid, "--json")
    assert (shown.code, shown.stderr) == (0, "") and shown.json()["state"] == "ACTIVE", shown
    console = run_schedule("console", uuid)
    assert (console.code, console.stdout) == (1, ""), console
    assert one_line_error(console.stderr, f"console of {uuid} "), console.stderr
    unknown = run_schedule(hostile)
    assert (unknown.code, unknown.stdout) == (1, ""), unknown
    assert one_line_error(unknown.stderr, f"no instance {hostile} "), unknown.stderr
    # An unreadable member of the group counts for nothing: placed as in an empty group.
    grouped = run_schedule("resources=VCPU:1,MEMORY_MB:64,DISK_GB:1", "--hint", "affinity=g")
    assert (grouped.code, grouped.stderr) == (0, ""), grouped
    assert grouped.stdout.startswith(f"NOTIFIED TARGET, {rp}, OF INSTANCE "), grouped.stdout


def one_line_error(stderr: str, says: str) -> bool:
    return stderr.startswith(f"schedule.py: error: {says}") and stderr.count("\n") == 1 \
        and stderr.endswith("\n")


# --- a record and spec written under a host's prefix without its claim there -----------------


def other_provider(placement) -> str:
    """Another host's provider, as Placement knows it (no daemon needed)."""
    other = "4f5e6d7c-8b9a-4c0d-8e1f-2a3b4c5d6e7f"
    placement.ensure_provider(other, "elsewhere")
    placement.set_inventory(other, {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048},
                                    "DISK_GB": {"total": 20}})
    return other


def claim_for(placement, spec: dict[str, Any], how: str) -> dict[str, Any] | None:
    """No claim, or one split between the spec's host (VCPU) and another (memory, disk)."""
    if how == "none":
        return None
    split = {spec["host"]: {"resources": {"VCPU": spec["resources"]["VCPU"]}},
             other_provider(placement): {"resources": {
                 "MEMORY_MB": spec["resources"]["MEMORY_MB"],
                 "DISK_GB": spec["resources"]["DISK_GB"]}}}
    placement.claim(spec["uuid"], split, "p", "u")
    return split


def held(placement, uuid: str) -> dict[str, Any]:
    """{provider: {"resources": ...}} as Placement holds it now."""
    return {rp: {"resources": allocation["resources"]} for rp, allocation in
            placement.get_allocations(uuid)["allocations"].items()}


def never_built(compute_config: dict[str, Any], uuid: str) -> None:
    assert [e for e in build_events(compute_config) if e.uuid == uuid] == []
    assert uuid not in fake_instances(compute_config)


ERRORS = {"none": "refused: Placement holds no claim for this instance",
          "split": "refused: the claim is split between this host (VCPU:1) and "}


@pytest.mark.parametrize("how", ["none", "split"])
def test_a_scheduled_instance_without_its_claim_here_never_builds(how, start_compute,
                                                                  compute_config, store,
                                                                  placement):
    compute = started(start_compute, store, compute_config)
    spec = make_spec(rp_of(compute_config))
    claim = claim_for(placement, spec, how)
    write_as_the_host(compute_config, spec, "SCHEDULED")
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"].startswith(ERRORS[how])
    never_built(compute_config, spec["uuid"])
    assert store.get(store.keys.spec(spec["host"], spec["uuid"])) is None
    # A split claim is not this host's alone: left for the operator's destroy to free.
    assert held(placement, spec["uuid"]) == (claim or {})
    assert compute.alive() and "Traceback" not in compute.log()


@pytest.mark.parametrize("how", ["none", "split"])
def test_a_restarted_host_never_resumes_a_build_without_its_claim_here(how, start_compute,
                                                                       compute_config, store,
                                                                       placement):
    compute = started(start_compute, store, compute_config)
    assert compute.terminate() == 0  # the host is down
    spec = make_spec(rp_of(compute_config))
    claim = claim_for(placement, spec, how)
    write_as_the_host(compute_config, spec, "BUILDING")  # as if it died mid-build
    compute = started(start_compute, store, compute_config)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"].startswith(ERRORS[how])
    never_built(compute_config, spec["uuid"])
    assert held(placement, spec["uuid"]) == (claim or {})
    assert compute.alive()


def test_a_claim_freed_while_its_host_was_down_ends_the_build_in_error(start_compute,
                                                                      compute_config, store,
                                                                      placement):
    """A build cut by the host's death (kill -9 mid-build); meanwhile the operator's side
    freed its claim. The next start checks the claim again: ERROR, the half-built guest
    removed, nothing claimed."""
    slow = deep_merge(compute_config, {"driver": {"fake": {"build_seconds": 30}}})
    compute = started(start_compute, store, slow)
    spec = make_spec(rp_of(compute_config))
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "BUILDING")
    wait_for(lambda: any(e.uuid == spec["uuid"] and e.event == "start"
                         for e in build_events(compute_config)), 20, what="the build to start")
    compute.kill9()
    placement.delete_allocations(spec["uuid"])
    compute = started(start_compute, store, compute_config)
    failed = wait_state(store, spec["uuid"], "ERROR")
    assert failed["error"] == ERRORS["none"]
    assert [e.event for e in build_events(compute_config) if e.uuid == spec["uuid"]] == ["start"]
    assert_nothing_left(store, placement, compute_config, spec)
