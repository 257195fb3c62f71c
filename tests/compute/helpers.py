"""Shared steps for the compute daemon tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyetcd.events

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Entry, Store, Txn
from etcd_compute.instances import ownership, records
from etcd_compute.instances.states import FINAL
from etcd_compute.keys import RECORDS
from etcd_compute.placement import PlacementClient
from tests.support import make_spec, wait_for

__all__ = ["make_spec"]  # re-exported: the compute tests import it from here

def claim_and_send(store: Store, placement: PlacementClient, spec: dict[str, Any]) -> None:
    """What a scheduler does: claim in Placement, then write the spec to the host's key."""
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    store.put(messages.INSTANCE_SPEC, store.keys.spec(spec["host"], spec["uuid"]), spec)


def send_destroy(store: Store, spec: dict[str, Any]) -> None:
    store.put(messages.INSTANCE_SPEC, store.keys.spec(spec["host"], spec["uuid"]),
              {**spec, "action": "destroy"})


def record(store: Store, uuid: str) -> dict[str, Any] | None:
    entry = record_entry(store, uuid)
    try:
        return messages.decode(messages.INSTANCE_RECORD, entry.value) if entry else None
    except InvalidMessage:
        return None  # unreadable (a hostile value): as good as none yet


def record_entry(store: Store, uuid: str) -> Entry | None:
    """The record key of `uuid` on whichever host has it (tests write specs without the
    scheduler's location key, so look on every host)."""
    for _ in range(10):  # it may move between any two reads: read it where it went
        location = records.locate(store, uuid)
        while location is not None:
            entry = store.get(store.keys.record(location["host"], uuid))
            now = records.locate(store, uuid)
            if entry is not None or now == location:
                return entry
            location = now
        entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
        listed = [entry.key for entry in entries
                  if (parsed := store.keys.parse_host_key(entry.key)) is not None
                  and parsed.kind == RECORDS and parsed.uuid == uuid]
        if not listed:
            return None
        for key in listed:
            entry = store.get(key)
            if entry is not None:
                return entry
        # Listed on a host, gone when read (a dead host's instance rebuilt elsewhere
        # between the two reads, as a CI run saw): look again.
    return None


def record_history(store: Store, rp: str, uuid: str, start_revision: int) -> list[str]:
    """Every state the record was written with since `start_revision`, in order (from etcd's
    history: no write can be missed the way polling misses one)."""
    events, cancel = store.client.watch_response(store.keys.record(rp, uuid),
                                                 start_revision=start_revision)
    states = []
    try:
        for response in events:
            for event in response.events:
                if isinstance(event, pyetcd.events.PutEvent):
                    states.append(json.loads(event.value)["state"])
            break  # the history up to now arrives in the first response
    finally:
        cancel()
    return states


def wait_state(store: Store, uuid: str, *states: str, timeout: float = 30) -> dict[str, Any]:
    """Wait for the record to reach one of `states`; fail at once on another final state."""

    def reached() -> dict[str, Any] | None:
        current = record(store, uuid)
        if current and current["state"] in states:
            return current
        # ERROR and DELETED never change again; ACTIVE still can (destroy).
        if current and current["state"] in FINAL - {"ACTIVE"}:
            raise AssertionError(f"instance {uuid} ended {current['state']}: {current}")
        return None

    return wait_for(reached, timeout, what=f"instance {uuid} to reach {'/'.join(states)}")


def fake_instances(compute_config: dict[str, Any]) -> set[str]:
    root = Path(compute_config["compute"]["state_dir"]) / "fake-instances"
    return {path.stem for path in root.glob("*.json")}


@dataclass(frozen=True)
class BuildEvent:
    """A line of the fake driver's builds.log."""

    uuid: str
    event: str  # start (every attempt) | built | exists (the instance was there already)
    #             | fence (uuid "-": the daemon fenced; builds in flight were cut)
    daemon: int  # pid of the worker's parent: one per compute daemon run
    at: float


def build_events(compute_config: dict[str, Any]) -> list[BuildEvent]:
    path = Path(compute_config["compute"]["state_dir"]) / "fake-instances" / "builds.log"
    if not path.exists():
        return []
    events = []
    for line in path.read_text().splitlines():
        uuid, event, daemon, at = line.split()
        events.append(BuildEvent(uuid, event, int(daemon), float(at)))
    return events


def builds_log(compute_config: dict[str, Any]) -> list[str]:
    """Uuids of instances the fake driver actually built, one per build."""
    return [e.uuid for e in build_events(compute_config) if e.event == "built"]


def assert_nothing_left(store: Store, placement: PlacementClient,
                        compute_config: dict[str, Any], spec: dict[str, Any]) -> None:
    """No allocation, no driver instance, no host/booted/console key for `spec`.

    The end state is written in etcd first and the claim freed right after (a host
    coming back in between must never run an instance without its claim): the claim
    gets a few seconds to go."""
    uuid, rp = spec["uuid"], spec["host"]
    wait_for(lambda: placement.get_allocations(uuid)["allocations"] == {}, 5,
             what=f"the claim of {uuid} to be freed")
    assert uuid not in fake_instances(compute_config)
    for key in ownership.host_keys(store.keys, rp, uuid):
        assert store.get(key) is None, f"{key} was left behind"


def worker_pids(compute_pid: int) -> list[int]:
    """The pool's worker processes (grandchildren through the forkserver)."""
    main = psutil.Process(compute_pid)
    return [p.pid for child in main.children() for p in child.children(recursive=True)]


def write_as_the_host(compute_config: dict[str, Any], spec: dict[str, Any], state: str) -> None:
    """Record and spec as the scheduler (SCHEDULED) or a daemon that died mid-build
    (BUILDING) leaves them, written with the host's own certificate."""
    record_ = records.new_record(spec, state, compute_config["compute"]["name"])
    with Store(compute_config["etcd"]) as as_host:
        as_host.commit(Txn([], [ownership.spec_put(as_host.keys, spec),
                                ownership.record_put(as_host.keys, record_)]))
