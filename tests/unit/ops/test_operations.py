"""The operator's commands over FakeStore and FakePlacement: show, destroy, list, console,
wait, hosts."""

from __future__ import annotations

import json
import time
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.errors import NotFound, UsageError
from etcd_compute.etcd import Txn
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import moves, records, scheduling, states
from etcd_compute.keys import RECORDS
from etcd_compute.ops import operations
from tests.support import make_spec
from tests.unit.fakes import FakePlacement, FakeStore

RP, OTHER = str(uuidlib.UUID(int=7)), str(uuidlib.UUID(int=8))
UNKNOWN = str(uuidlib.UUID(int=99))


def scheduled(store: FakeStore, placement: FakePlacement | None = None, host: str = RP,
              **extra) -> dict:
    """An instance as the scheduler leaves it: spec, SCHEDULED record, location (and a
    claim)."""
    spec = make_spec(host, **extra)
    alive(store, host)
    assert scheduling.schedule(store, [(spec, "host-a")]) is not None
    if placement is not None:
        placement.consumers[spec["uuid"]] = {"allocations": spec["allocations"],
                                             "consumer_generation": 1}
    return spec


def alive(store: FakeStore, host: str, name: str = "h") -> None:
    """The host's heartbeat key: it runs, and would act on a destroy request."""
    store.put(messages.ALIVE, store.keys.alive(host), {"host": host, "name": name, "since": 1.0})


def record_of(store: FakeStore, uuid: str) -> dict | None:
    return records.find(store, uuid)[1].record


def read(store: FakeStore, uuid: str) -> records.RecordRead:
    return records.find(store, uuid)[1]


def set_state(store: FakeStore, uuid: str, state: str) -> None:
    record = record_of(store, uuid)
    store.put(messages.INSTANCE_RECORD, store.keys.record(record["host"], uuid),
              {**record, "state": state, "updated_at": time.time()})


def expired(store: FakeStore, spec: dict) -> None:
    """The host deleted the instance and its DELETED record expired: only the operator's keys
    (location, member) are left."""
    host_txn.delete(store, spec, read(store, spec["uuid"]), ttl=60)
    store.expire(store.get(store.keys.record(spec["host"], spec["uuid"])).lease)


def keys_left(store: FakeStore) -> set[str]:
    """Every key but the hosts' heartbeats (no instance's)."""
    return {e.key for e in store.get_prefix("")[0] if "/alive/" not in e.key}


# --------------------------------------------------------------------------- show


def test_show_adds_the_booted_ip_to_a_record_without_one():
    store = FakeStore()
    spec = scheduled(store)
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "192.168.123.7")
    shown = operations.show(store, spec["uuid"])
    assert (shown["state"], shown["ip"]) == ("SCHEDULED", "192.168.123.7")
    assert record_of(store, spec["uuid"])["ip"] is None  # shown, not written


def test_show_keeps_the_record_ip_over_the_booted_key():
    store = FakeStore()
    spec = scheduled(store)
    record = record_of(store, spec["uuid"])
    store.put(messages.INSTANCE_RECORD, store.keys.record(RP, spec["uuid"]),
              {**record, "ip": "10.0.0.1"})
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.9.9.9")
    assert operations.show(store, spec["uuid"])["ip"] == "10.0.0.1"
    assert operations.show(store, scheduled(store)["uuid"])["ip"] is None


def test_show_reads_the_record_on_the_host_the_location_names():
    store = FakeStore()
    spec = scheduled(store, host=OTHER)
    store.put_raw(store.keys.booted(OTHER, spec["uuid"]), "10.0.0.8")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.7")  # not where it is
    shown = operations.show(store, spec["uuid"])
    assert (shown["host"], shown["ip"]) == (OTHER, "10.0.0.8")


def test_show_unknown_or_unreadable_is_not_found_and_a_non_uuid_a_usage_error():
    store = FakeStore()
    with pytest.raises(NotFound, match=f"no instance {UNKNOWN} .never scheduled"):
        operations.show(store, UNKNOWN)
    store.put_raw(store.keys.location(UNKNOWN), "{broken")
    with pytest.raises(NotFound):
        operations.show(store, UNKNOWN)
    spec = scheduled(store)
    store.put_raw(store.keys.record(RP, spec["uuid"]), "{broken")
    with pytest.raises(NotFound):
        operations.show(store, spec["uuid"])
    assert records.locate(store, spec["uuid"]) is not None  # still held by its host
    with pytest.raises(UsageError, match="'xyz' is not an instance uuid"):
        operations.show(store, "xyz")


def test_show_of_an_instance_whose_record_expired_forgets_it():
    store = FakeStore()
    spec = scheduled(store, group={"name": "g", "policy": "affinity"})
    expired(store, spec)
    assert keys_left(store) == {store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    with pytest.raises(NotFound, match=f"no instance {spec['uuid']} .never scheduled"):
        operations.show(store, spec["uuid"])
    assert keys_left(store) == set()


# ------------------------------------------------------------------------ destroy


def test_destroy_requests_it_from_the_host_by_rewriting_the_spec():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    assert operations.destroy(store, placement, spec["uuid"]) == "requested"
    rewritten, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, spec["uuid"]))
    request = rewritten.pop("request")
    assert rewritten == {**spec, "action": "destroy"}
    assert request["by"] and request["at"] and request["id"]  # who asked, for its events
    assert spec["uuid"] in placement.consumers  # the host frees the claim when it is done


def test_destroy_twice_is_already_requested():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    operations.destroy(store, placement, spec["uuid"])
    revision = store.revision
    assert operations.destroy(store, placement, spec["uuid"]) == "already"
    assert store.revision == revision  # nothing written


def test_destroy_an_error_instance_removes_record_keys_and_claim():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement, group={"name": "g", "policy": "affinity"})
    # The compute failed it: ERROR, the host's keys but the record gone, the operator's
    # location and member still there (its claim still held here).
    host_txn.fail(store, spec, read(store, spec["uuid"]), "disk full")
    store.put_raw(store.keys.booted(RP, spec["uuid"]), "10.0.0.2")  # a leftover goes too
    assert keys_left(store) == {store.keys.record(RP, spec["uuid"]),
                                store.keys.events(RP, spec["uuid"]),
                                store.keys.booted(RP, spec["uuid"]),
                                store.keys.location(spec["uuid"]),
                                store.keys.group_member("g", spec["uuid"])}
    assert operations.destroy(store, placement, spec["uuid"]) == "removed"
    assert keys_left(store) == set()
    assert spec["uuid"] not in placement.consumers


def test_destroy_a_deleted_instance_is_deleted_and_changes_nothing():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store)
    host_txn.delete(store, spec, read(store, spec["uuid"]), ttl=60)
    revision = store.revision
    assert operations.destroy(store, placement, spec["uuid"]) == "deleted"
    assert store.revision == revision and placement.calls == []


def test_destroy_drops_an_unreadable_spec_and_cleans_up():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    store.put_raw(store.keys.spec(RP, spec["uuid"]), "{not json")
    assert operations.destroy(store, placement, spec["uuid"]) == "removed"
    assert store.get(store.keys.spec(RP, spec["uuid"])) is None
    assert record_of(store, spec["uuid"]) is None
    assert spec["uuid"] not in placement.consumers


def test_destroy_goes_to_the_host_the_location_names_after_a_move():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    entry = store.get(store.keys.spec(RP, spec["uuid"]))
    host_txn.begin_build(store, spec, entry.mod_revision, read(store, spec["uuid"]), "h")
    host_txn.hand_over(store, spec, read(store, spec["uuid"]), "broken")
    moves.move(store, spec, read(store, spec["uuid"]), OTHER,
                   {OTHER: {"resources": spec["resources"]}}, [])
    alive(store, OTHER)
    assert operations.destroy(store, placement, spec["uuid"]) == "requested"
    assert store.read(messages.INSTANCE_SPEC,
                      store.keys.spec(OTHER, spec["uuid"]))[0]["action"] == "destroy"
    assert store.get_prefix(store.keys.host(RP))[0] == []


def test_destroy_of_an_instance_whose_record_expired_is_not_found_and_forgets_it():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, group={"name": "g", "policy": "anti-affinity"})
    expired(store, spec)
    with pytest.raises(NotFound, match=f"no instance {spec['uuid']}"):
        operations.destroy(store, placement, spec["uuid"])
    assert keys_left(store) == set() and placement.calls == []


def test_destroy_of_an_unreadable_record_without_a_spec_removes_it():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    store.delete(store.keys.spec(RP, spec["uuid"]))
    store.put_raw(store.keys.record(RP, spec["uuid"]), "{broken")
    assert operations.destroy(store, placement, spec["uuid"]) == "removed"
    assert keys_left(store) == set() and spec["uuid"] not in placement.consumers


def test_destroy_unknown_is_not_found():
    with pytest.raises(NotFound, match=f"no instance {UNKNOWN}"):
        operations.destroy(FakeStore(), FakePlacement(), UNKNOWN)


class MovingStore(FakeStore):
    """The spec changes under every write we try (a busy compute)."""

    def commit(self, txn: Txn) -> int | None:
        if any(c.target == "mod" for c in txn.compare):
            return None
        return super().commit(txn)


def test_destroy_gives_up_when_the_spec_keeps_changing():
    store = MovingStore()
    spec = scheduled(store)
    with pytest.raises(UsageError, match="kept changing while destroying it; try again"):
        operations.destroy(store, FakePlacement(), spec["uuid"])
    assert store.read(messages.INSTANCE_SPEC,
                      store.keys.spec(RP, spec["uuid"]))[0]["action"] == "build"


# ---------------------------------------------------------------------- list, console


def test_list_instances_oldest_first_then_by_uuid_skipping_unreadable():
    store = FakeStore()
    late = scheduled(store, requested_at=300.0)
    early_b = scheduled(store, uuid=str(uuidlib.UUID(int=0xB)), requested_at=100.0, host=OTHER)
    early_a = scheduled(store, uuid=str(uuidlib.UUID(int=0xA)), requested_at=100.0)
    middle = scheduled(store, requested_at=200.0, host=OTHER)
    garbled = scheduled(store)
    store.put_raw(store.keys.record(RP, garbled["uuid"]), "{broken")
    store.put_raw(store.keys.location(UNKNOWN), "{broken")
    listed = [r["uuid"] for r in operations.list_instances(store)]
    assert listed == [early_a["uuid"], early_b["uuid"], middle["uuid"], late["uuid"]]
    # An unreadable record is still its host's: its location stays.
    assert records.locate(store, garbled["uuid"]) is not None
    assert operations.list_instances(FakeStore()) == []


def test_list_instances_forgets_instances_whose_record_expired():
    store = FakeStore()
    kept = scheduled(store, group={"name": "g", "policy": "affinity"})
    gone = scheduled(store, group={"name": "g", "policy": "affinity"}, host=OTHER)
    expired(store, gone)
    assert [r["uuid"] for r in operations.list_instances(store)] == [kept["uuid"]]
    assert records.locate(store, gone["uuid"]) is None
    assert store.get(store.keys.group_member("g", gone["uuid"])) is None
    assert records.locate(store, kept["uuid"]) is not None


@pytest.mark.parametrize(("text", "state"), [("active", "ACTIVE"), (" Error ", "ERROR"),
                                             ("DELETED", "DELETED"), ("rescheduling",
                                                                      "RESCHEDULING")])
def test_a_state_is_named_in_any_case(text, state):
    assert operations.check_state(text) == state


def test_an_unknown_state_is_a_usage_error_naming_the_states():
    with pytest.raises(UsageError) as caught:
        operations.check_state("running")
    assert str(caught.value) == (
        "--state 'running': no such state; one of SCHEDULED, BUILDING, ACTIVE, SHUTOFF, "
        "STOPPING, STARTING, SUSPENDED, SUSPENDING, RESUMING, PAUSED, PAUSING, UNPAUSING, "
        "REBOOTING, REBUILDING, RESIZING, SNAPSHOTTING, FILTERING, PLUGGING, MIGRATING, "
        "MIGRATED, INCOMING, RESCHEDULING, ERROR, DELETING, DELETED")


def test_list_filters_by_host_uuid_or_name_and_by_state():
    store = FakeStore()
    a1, a2 = scheduled(store, requested_at=1.0), scheduled(store, requested_at=2.0)
    b1 = scheduled(store, host=OTHER, requested_at=3.0)
    set_state(store, a2["uuid"], "ERROR")
    set_state(store, b1["uuid"], "ERROR")

    def listed(**filters) -> list[str]:
        return [r["uuid"] for r in operations.list_instances(store, **filters)]

    assert listed(host=RP) == [a1["uuid"], a2["uuid"]]
    assert listed(state="error") == [a2["uuid"], b1["uuid"]]
    assert listed(host=OTHER, state="ERROR") == [b1["uuid"]]
    assert listed(host=RP, state="deleted") == []
    # By name: the records' host_name ("host-a" here, on both hosts) ...
    assert listed(host="host-a") == [a1["uuid"], a2["uuid"], b1["uuid"]]
    # ... and a live host's name from its heartbeat, when no record names it.
    alive(store, OTHER, "hv2")
    assert listed(host="hv2") == [b1["uuid"]]


def test_list_of_a_live_host_without_instances_is_empty_and_of_no_host_not_found():
    store = FakeStore()
    scheduled(store)
    alive(store, OTHER, "idle")
    assert operations.list_instances(store, host="idle") == []
    assert operations.list_instances(store, host=OTHER) == []
    for host in ("hv-typo", UNKNOWN):
        with pytest.raises(NotFound) as caught:
            operations.list_instances(store, host=host)
        assert str(caught.value) == (f"no host {host!r}: neither a live host nor the host of "
                                     "any instance (give its name or provider uuid)")


def test_list_refuses_an_unknown_state_before_reading_anything():
    class Untouchable(FakeStore):
        def get_prefix(self, prefix: str, keys_only: bool = False):
            raise AssertionError("read before the state was checked")

    with pytest.raises(UsageError, match="no such state"):
        operations.list_instances(Untouchable(), state="up")


def test_select_keeps_the_order_and_matches_both_filters():
    listed = [{"uuid": "1", "host": RP, "state": "ACTIVE"},
               {"uuid": "2", "host": OTHER, "state": "ACTIVE"},
               {"uuid": "3", "host": RP, "state": "ERROR"},
               {"uuid": "4", "host": None, "state": "ERROR"}]
    assert [r["uuid"] for r in operations.select(listed)] == ["1", "2", "3", "4"]
    assert [r["uuid"] for r in operations.select(listed, {RP})] == ["1", "3"]
    assert [r["uuid"] for r in operations.select(listed, None, "ERROR")] == ["3", "4"]
    assert [r["uuid"] for r in operations.select(listed, {RP, OTHER}, "ACTIVE")] == ["1", "2"]


def test_console_prints_the_published_text():
    store = FakeStore()
    spec = scheduled(store)
    store.put(messages.CONSOLE, store.keys.console(RP, spec["uuid"]),
              {"uuid": spec["uuid"], "text": "login: ", "updated_at": 1.0})
    assert operations.console(store, spec["uuid"]) == "login: "


def test_console_not_published_yet_names_the_state():
    store = FakeStore()
    spec = scheduled(store)
    with pytest.raises(NotFound) as caught:
        operations.console(store, spec["uuid"])
    assert str(caught.value) == (f"console of {spec['uuid']} not published yet (state "
                                 "SCHEDULED); the compute publishes it once the instance is "
                                 "ACTIVE")
    store.put_raw(store.keys.console(RP, spec["uuid"]), '{"text": 1}')  # unreadable: as absent
    with pytest.raises(NotFound, match="not published yet"):
        operations.console(store, spec["uuid"])


def test_console_is_read_on_the_host_the_location_names():
    store = FakeStore()
    spec = scheduled(store, host=OTHER)
    store.put(messages.CONSOLE, store.keys.console(RP, spec["uuid"]),
              {"uuid": spec["uuid"], "text": "elsewhere", "updated_at": 1.0})
    with pytest.raises(NotFound, match="not published yet"):
        operations.console(store, spec["uuid"])
    store.put(messages.CONSOLE, store.keys.console(OTHER, spec["uuid"]),
              {"uuid": spec["uuid"], "text": "here", "updated_at": 1.0})
    assert operations.console(store, spec["uuid"]) == "here"


def test_console_of_an_unknown_instance():
    with pytest.raises(NotFound) as caught:
        operations.console(FakeStore(), UNKNOWN)
    assert str(caught.value) == f"no instance {UNKNOWN}"
    store = FakeStore()
    spec = scheduled(store)
    expired(store, spec)
    with pytest.raises(NotFound) as caught:
        operations.console(store, spec["uuid"])
    assert str(caught.value) == f"no instance {spec['uuid']}"


# --------------------------------------------------------------------------- wait


class ScriptedStore(FakeStore):
    """Each read of an instance record first moves it to the next state of its script."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: dict[str, list[str | None]] = {}

    def get(self, key: str):
        parsed = self.keys.parse_host_key(key)
        uuid = parsed.uuid if parsed and parsed.kind == RECORDS else None
        if uuid and self.scripts.get(uuid):
            state = self.scripts[uuid].pop(0)
            if state is None:
                self.delete(key)
            else:
                record = json.loads(self.entries[key].value)
                self.put(messages.INSTANCE_RECORD, key, {**record, "state": state})
        return super().get(key)


def test_wait_reports_each_state_change_once_and_returns_the_final_records():
    store = ScriptedStore()
    first, second = scheduled(store), scheduled(store)
    store.scripts[first["uuid"]] = ["SCHEDULED", "SCHEDULED", "BUILDING", "BUILDING", "ACTIVE"]
    store.scripts[second["uuid"]] = ["BUILDING", "ERROR"]
    changes = []
    last = operations.wait(store, [first["uuid"], second["uuid"]], states.FINAL, timeout=5,
                           on_change=lambda u, r: changes.append((u, r and r["state"])),
                           interval=0)
    assert [s for u, s in changes if u == first["uuid"]] == ["SCHEDULED", "BUILDING", "ACTIVE"]
    assert [s for u, s in changes if u == second["uuid"]] == ["BUILDING", "ERROR"]
    assert {u: r["state"] for u, r in last.items()} == {first["uuid"]: "ACTIVE",
                                                         second["uuid"]: "ERROR"}


def test_wait_ends_for_a_record_that_is_gone():
    store = ScriptedStore()
    spec = scheduled(store)
    store.scripts[spec["uuid"]] = ["DELETING", None]
    changes = []
    last = operations.wait(store, [spec["uuid"]], states.FINAL, timeout=5,
                           on_change=lambda u, r: changes.append(r and r["state"]), interval=0)
    assert changes == ["DELETING", None]
    assert last == {spec["uuid"]: None}


def test_wait_times_out_naming_the_states_still_pending():
    store = FakeStore()
    done, stuck = scheduled(store), scheduled(store)
    set_state(store, done["uuid"], "ACTIVE")
    changes = []
    with pytest.raises(operations.WaitTimeout) as caught:
        operations.wait(store, [done["uuid"], stuck["uuid"]], states.FINAL, timeout=0.05,
                        on_change=lambda u, r: changes.append(u), interval=0.01)
    assert str(caught.value) == ("1 instance(s) still not done after 0.05 s (SCHEDULED); "
                                 "they go on without us")
    assert sorted(changes) == sorted([done["uuid"], stuck["uuid"]])  # each reported once


# -------------------------------------------------------------------------- hosts


def test_hosts_show_capacity_usage_alive_disabled_and_instances_by_name():
    store, placement = FakeStore(), FakePlacement()
    busy, idle = str(uuidlib.UUID(int=1)), str(uuidlib.UUID(int=2))
    placement.ensure_provider(busy, "b-host")
    placement.set_inventory(busy, {"VCPU": {"total": 4, "allocation_ratio": 4.0},
                                   "MEMORY_MB": {"total": 4096, "reserved": 1024}})
    placement.ensure_provider(idle, "a-host")
    placement.set_inventory(idle, {"VCPU": {"total": 2}})
    placement.set_traits(idle, {"COMPUTE_STATUS_DISABLED"})
    placement.claim(str(uuidlib.uuid4()), {busy: {"resources": {"VCPU": 3, "MEMORY_MB": 512}}},
                    "p", "u")
    store.put(messages.ALIVE, store.keys.alive(busy),
              {"host": busy, "name": "b-host", "since": 1.0})
    store.put_raw(store.keys.alive(idle), json.dumps({"host": "bad"}))  # unreadable: not alive
    for _ in range(2):
        instance = str(uuidlib.uuid4())
        store.put_raw(store.keys.spec(busy, instance), "{}")
        store.put_raw(store.keys.record(busy, instance), "{}")  # counted once, by its spec
    assert operations.hosts(store, placement) == [
        {"uuid": idle, "name": "a-host", "alive": False, "disabled": True, "instances": 0,
         "traits": ["COMPUTE_STATUS_DISABLED"], "driver": None,
         "resources": {"VCPU": {"capacity": 2, "used": 0}}},
        {"uuid": busy, "name": "b-host", "alive": True, "disabled": False, "instances": 2,
         "traits": [], "driver": None, "resources": {"VCPU": {"capacity": 16, "used": 3},
                       "MEMORY_MB": {"capacity": 3072, "used": 512}}},
    ]


def test_destroy_on_a_dead_host_ends_deleted_and_frees_the_claim_here():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    store.delete(store.keys.alive(RP))  # its heartbeat lease expired: nobody reads its specs
    assert operations.destroy(store, placement, spec["uuid"], deleted_record_ttl=42) == \
        "finished"
    assert record_of(store, spec["uuid"])["state"] == "DELETED"
    assert spec["uuid"] not in placement.consumers
    assert store.get(store.keys.spec(RP, spec["uuid"])) is None
    # Every key it has left expires with the record, after the TTL asked.
    lease = store.get(store.keys.record(RP, spec["uuid"])).lease
    assert store.leases[lease] == 42
    assert store.get(store.keys.location(spec["uuid"])).lease == lease
    store.expire(lease)
    assert not [e.key for e in store.get_prefix("")[0] if spec["uuid"] in e.key]


def test_destroy_wait_that_saw_it_deleted_lets_its_location_go_with_the_record():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    operations.destroy(store, placement, spec["uuid"])
    host_txn.delete(store, spec, records.read_record(store, RP, spec["uuid"]), 60)  # the host
    operations.destroyed(store, spec["uuid"])
    lease = store.get(store.keys.record(RP, spec["uuid"])).lease
    assert store.get(store.keys.location(spec["uuid"])).lease == lease


def test_destroy_on_a_host_that_came_back_meanwhile_is_asked_of_it():
    store, placement = FakeStore(), FakePlacement()
    spec = scheduled(store, placement)
    store.delete(store.keys.alive(RP))
    real_delete = host_txn.delete

    def back_just_before(store_, spec_, read_, ttl, guard=(), detail=None):
        alive(store, RP)  # the host's new lease lands between our read and our write
        return real_delete(store_, spec_, read_, ttl, guard, detail)

    host_txn.delete = back_just_before
    try:
        outcome = operations.destroy(store, placement, spec["uuid"])
    finally:
        host_txn.delete = real_delete
    assert outcome == "requested"
    spec_now, _ = store.read(messages.INSTANCE_SPEC, store.keys.spec(RP, spec["uuid"]))
    assert spec_now["action"] == "destroy"


# --------------------------------------------------------------------------- remote console

CONSOLE_SETTINGS = {"token_ttl_seconds": 600, "base_url": "http://proxy:6080/vnc_lite.html"}


def test_an_operator_gets_a_console_url_for_a_built_instance_on_a_relaying_host():
    from etcd_compute import remote_consoles
    from etcd_compute.hosts import publish_console_address

    store = FakeStore()
    spec = scheduled(store)
    with pytest.raises(UsageError, match="not ready \\(state SCHEDULED\\)"):
        operations.remote_console(store, spec["uuid"], CONSOLE_SETTINGS)
    set_state(store, spec["uuid"], states.ACTIVE)
    with pytest.raises(operations.NoRemoteConsole, match="serves no remote console"):
        operations.remote_console(store, spec["uuid"], CONSOLE_SETTINGS)
    assert not store.get_prefix(store.keys.console_tokens())[0]  # nothing issued
    publish_console_address(store, RP, "192.0.2.1:6081")
    url = operations.remote_console(store, spec["uuid"], CONSOLE_SETTINGS)
    assert url.startswith("http://proxy:6080/vnc_lite.html?path=%3Ftoken%3D")
    token = url.rsplit("%3D", 1)[1]
    granted = remote_consoles.consume(store, token)
    assert granted.instance_uuid == spec["uuid"] and "@" in granted.issued_by


def test_no_console_url_for_an_instance_gone_or_unknown():
    store = FakeStore()
    spec = scheduled(store)
    set_state(store, spec["uuid"], states.DELETING)
    with pytest.raises(NotFound, match="no instance"):
        operations.remote_console(store, spec["uuid"], CONSOLE_SETTINGS)
    with pytest.raises(NotFound, match="no instance"):
        operations.remote_console(store, UNKNOWN, CONSOLE_SETTINGS)
