"""The service's host cache: one snapshot, then watch events; what the planner sees is what
etcd holds, whatever the watch replays."""

from __future__ import annotations

import time
import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.controller.hostcache import HostCache
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.scheduler.test_scheduler import account, add_host

A = "00000000-0000-0000-0000-00000000000a"
B = "00000000-0000-0000-0000-00000000000b"


def alive(store: FakeStore, rp: str, name: str) -> None:
    store.put(messages.ALIVE, store.keys.alive(rp), {"host": rp, "name": name, "since": 1.0})


def test_the_snapshot_has_heartbeats_stats_and_instance_counts():
    store = FakeStore("/p")
    alive(store, A, "hv-a")
    store.put_raw(store.keys.alive(B), "{garbage")
    store.put(messages.HOST_STATS, store.keys.stats(A), {"build_failures": [5.0],
                                                         "updated_at": 6.0})
    for _ in range(2):
        store.put_raw(store.keys.spec(A, str(uuidlib.uuid4())), "{}")
    store.put_raw(store.keys.record(B, str(uuidlib.uuid4())), "{}")  # a record: not counted
    cache = HostCache(store.keys)
    assert cache.load(store) == store.revision
    cluster = cache.cluster()
    assert cluster.alive == {A: "hv-a"}  # an unreadable heartbeat counts as none
    assert cluster.build_failures == {A: [5.0]}
    assert cluster.instances == {A: 2}


def test_events_after_the_snapshot_change_it_and_older_ones_are_skipped():
    store = FakeStore("/p")
    alive(store, A, "hv-a")
    cache = HostCache(store.keys)
    snapshot = cache.load(store)
    # A delete from before the snapshot, replayed by a watch that started earlier.
    cache.apply(store.keys.alive(A), None, snapshot - 1)
    assert cache.cluster().alive == {A: "hv-a"}
    alive(store, B, "hv-b")
    entry = store.get(store.keys.alive(B))
    cache.apply(entry.key, entry.value, entry.mod_revision)
    spec = store.keys.spec(B, str(uuidlib.uuid4()))
    cache.apply(spec, b"{}", snapshot + 2)
    cache.apply(store.keys.alive(A), None, snapshot + 3)
    cache.apply(store.keys.stats(B), b'{"build_failures": "many"}', snapshot + 4)
    cluster = cache.cluster()
    assert cluster.alive == {B: "hv-b"}
    assert cluster.instances == {B: 1} and cluster.build_failures == {}
    cache.apply(spec, None, snapshot + 5)
    assert cache.cluster().instances == {}


def test_what_the_planner_gets_is_a_copy():
    store = FakeStore("/p")
    alive(store, A, "hv-a")
    cache = HostCache(store.keys)
    cache.load(store)
    cluster = cache.cluster()
    cluster.alive.clear()
    cluster.instances[A] += 5
    assert cache.cluster().alive == {A: "hv-a"} and cache.cluster().instances == {}


def test_the_view_has_the_live_hosts_accounts_and_who_is_disabled_kept_by_the_watch():
    store, placement = FakeStore("/t"), FakePlacement()
    up, old = (add_host(placement, store, name) for name in ("up", "old"))
    account(placement, store, up)
    cache = HostCache(store.keys)
    cache.load(store)
    view = cache.view()
    assert set(view.accounts) == {up} and view.lacking == {old} and not view.usable
    account(placement, store, old)
    entry = store.get(store.keys.stats(old))
    cache.apply(entry.key, entry.value, entry.mod_revision)
    store.put(messages.HOST_MAINTENANCE, store.keys.maintenance(up),
              {"since": time.time(), "reason": None, "by": "ann", "draining": False})
    entry = store.get(store.keys.maintenance(up))
    cache.apply(entry.key, entry.value, entry.mod_revision)
    view = cache.view()
    assert view.usable and view.disabled == {up}
    cache.apply(entry.key, None, entry.mod_revision + 1)  # enabled again
    cache.apply(store.keys.stats(old), b"{broken", entry.mod_revision + 2)
    view = cache.view()
    assert view.disabled == set() and view.lacking == {old}
