"""In-memory stand-ins for etcd, Placement and the worker pool, for the unit layer only.

They keep the contracts the real ones have and our code relies on: etcd's
revisions and compare-then-write transactions, Placement's capacity checks,
consumer generations and all-or-nothing POST /allocations. The functional
tests (tests/compute, tests/scheduler, tests/virt) prove the same behaviour
against the real services.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import itertools
import queue
import threading
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl

import grpc
import pyetcd.events

from etcd_compute.errors import ConflictError, EtcdUnavailable, NotFound
from etcd_compute.etcd import Compare, Delete, Entry, KeyValueStore, Put, Txn
from etcd_compute.keys import Keys

# --------------------------------------------------------------------------- etcd


class FakeStore(KeyValueStore):
    """etcd's key space in a dict: one revision counter, mod/create revisions, versions."""

    def __init__(self, prefix: str = "") -> None:
        self.keys = Keys(prefix)
        self.revision = 1
        self.entries: dict[str, Entry] = {}
        self.versions: dict[str, int] = {}
        self.leases: dict[int, int] = {}
        self._lease_ids = itertools.count(1000)
        # Every committed transaction, in order (tests inspect what was written together).
        self.committed: list[Txn] = []

    def get(self, key: str) -> Entry | None:
        return self.entries.get(key)

    def get_prefix(self, prefix: str, keys_only: bool = False) -> tuple[list[Entry], int]:
        found = [e for k, e in sorted(self.entries.items()) if k.startswith(prefix)]
        if keys_only:
            found = [Entry(e.key, b"", e.mod_revision, e.create_revision, e.lease)
                     for e in found]
        return found, self.revision

    def _holds(self, compare: Compare) -> bool:
        if compare.range_end is not None:
            keys = [k for k in self.entries if compare.key <= k < compare.range_end]
        else:
            keys = [compare.key]
        for key in keys:
            entry = self.entries.get(key)
            actual = {"mod": entry.mod_revision if entry else 0,
                      "create": entry.create_revision if entry else 0,
                      "version": self.versions.get(key, 0) if entry else 0}[compare.target]
            ok = {"==": actual == compare.value, "!=": actual != compare.value,
                  "<": actual < compare.value, ">": actual > compare.value}[compare.op]
            if not ok:
                return False
        return True

    def commit(self, txn: Txn) -> int | None:
        if not all(self._holds(c) for c in txn.compare):
            return None
        self.revision += 1
        for op in txn.success:
            if isinstance(op, Put):
                if op.lease is not None and op.lease not in self.leases:
                    raise AssertionError(f"put with unknown lease {op.lease}")
                old = self.entries.get(op.key)
                value = op.value.encode() if isinstance(op.value, str) else op.value
                self.entries[op.key] = Entry(op.key, value, self.revision,
                                             old.create_revision if old else self.revision,
                                             op.lease or 0)
                self.versions[op.key] = self.versions.get(op.key, 0) + 1 if old else 1
            elif isinstance(op, Delete):
                self.entries.pop(op.key, None)
                self.versions.pop(op.key, None)
        self.committed.append(txn)
        return self.revision

    def grant(self, ttl: int) -> int:
        lease = next(self._lease_ids)
        self.leases[lease] = ttl
        return lease

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        """The TTL a live lease has again (0: etcd forgot it)."""
        return self.leases.get(lease_id, 0)

    def lease(self, ttl: int) -> FakeLease:
        return FakeLease(self, self.grant(ttl), ttl)

    def expire(self, lease: int) -> None:
        """What etcd does when a lease runs out: its keys go."""
        self.leases.pop(lease, None)
        for key in [k for k, e in self.entries.items() if e.lease == lease]:
            self.commit(Txn([], [Delete(key)]))

    def put_raw(self, key: str, value: str | bytes) -> int:
        """Write anything at all (what a hostile or broken writer could)."""
        result = self.commit(Txn([], [Put(key, value)]))  # type: ignore[arg-type]
        assert result is not None
        return result

    def delete_prefix(self, prefix: str) -> None:
        for key in [k for k in self.entries if k.startswith(prefix)]:
            del self.entries[key]


class WatchingFakeStore(FakeStore):
    """A FakeStore with pyetcd's `client.add_watch_callback` / `cancel_watch` for one key:
    each put or delete of a watched key calls its callback with a watch response."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix)
        self.client = self
        self._watches: dict[int, tuple[str, Callable[[Any], None]]] = {}
        self._prefix_watches: dict[int, tuple[str, Callable[[Any], None]]] = {}
        self._watch_ids = itertools.count(1)

    def add_watch_callback(self, key: str, callback: Callable[[Any], None],
                           start_revision: int = 0) -> int:
        import types

        import pyetcd.events

        watch_id = next(self._watch_ids)
        self._watches[watch_id] = (key, callback)
        entry = self.entries.get(key)
        if entry is not None and entry.mod_revision >= start_revision:  # replayed, as etcd does
            kv = types.SimpleNamespace(key=key.encode(), value=entry.value,
                                       mod_revision=entry.mod_revision)
            callback(types.SimpleNamespace(
                events=[pyetcd.events.PutEvent(types.SimpleNamespace(kv=kv))]))
        return watch_id

    def cancel_watch(self, watch_id: int) -> None:
        self._watches.pop(watch_id, None)

    def watch_prefix_response(self, prefix: str, start_revision: int = 0,
                              progress_notify: bool = False) -> tuple[Any, Any]:
        """pyetcd's prefix watch (what `watching.PrefixWatch` uses), over the same
        callbacks: keys under `prefix` changed at or after `start_revision`, then live."""
        import types

        import pyetcd.events

        responses: queue.Queue[Any] = queue.Queue()
        watch_id = next(self._watch_ids)
        self._prefix_watches[watch_id] = (prefix, responses.put)
        for key, entry in sorted(self.entries.items(), key=lambda item: item[1].mod_revision):
            if key.startswith(prefix) and entry.mod_revision >= start_revision:
                kv = types.SimpleNamespace(key=key.encode(), value=entry.value,
                                           mod_revision=entry.mod_revision)
                responses.put(types.SimpleNamespace(
                    events=[pyetcd.events.PutEvent(types.SimpleNamespace(kv=kv))]))

        def cancel() -> None:
            self._prefix_watches.pop(watch_id, None)
            responses.put(None)

        def stream() -> Any:
            while (response := responses.get()) is not None:
                yield response
        return stream(), cancel

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def commit(self, txn: Txn) -> int | None:
        import types

        import pyetcd.events

        revision = super().commit(txn)
        if revision is None:
            return None
        for op in txn.success:
            watches = [(op.key, callback) for prefix, callback in
                       list(self._prefix_watches.values()) if op.key.startswith(prefix)]
            for key, callback in list(self._watches.values()) + watches:
                if op.key != key:
                    continue
                entry = self.entries.get(key)
                kind = pyetcd.events.PutEvent if entry else pyetcd.events.DeleteEvent
                kv = types.SimpleNamespace(key=key.encode(), value=entry.value if entry else b"",
                                           mod_revision=revision)
                callback(types.SimpleNamespace(events=[kind(types.SimpleNamespace(kv=kv))]))
        return revision


class FakeLease:
    """pyetcd's Lease as far as we use it: id, refresh(), revoke()."""

    def __init__(self, store: FakeStore, lease_id: int, ttl: int):
        self.store, self.id, self.ttl = store, lease_id, ttl

    def refresh(self) -> list[Any]:
        alive = self.id in self.store.leases
        return [type("LeaseKeepAliveResponse", (), {"TTL": self.ttl if alive else 0})()]

    def revoke(self) -> None:
        self.store.expire(self.id)


class WatchedStore(FakeStore):
    """The fake store with what a daemon asks of its connection besides: watches, and close.

    Each subscription to a prefix delivers the next script given for it (responses, then
    maybe a fault raised); then, like a live watch with nothing to say, it waits until it is
    cancelled or the store is closed."""

    def __init__(self, prefix: str = "") -> None:
        super().__init__(prefix)
        self.closed = False
        # False: etcd is down; every read, write and lease raises what Store's then do.
        self.reachable = True
        self.scripts: dict[str, queue.Queue[tuple[list[list[Any]], Exception | None]]] = \
            collections.defaultdict(queue.Queue)
        self.watched_from: list[tuple[str, int]] = []
        self._all_cancelled = threading.Event()
        self.client = SimpleNamespace(watch_prefix_response=self._watch)

    def _answers(self) -> None:
        if not self.reachable:
            raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable (UNAVAILABLE); check "
                                  "that etcd runs and etcd.endpoints in the config")

    def get(self, key: str) -> Entry | None:
        self._answers()
        return super().get(key)

    def get_prefix(self, prefix: str, keys_only: bool = False) -> tuple[list[Entry], int]:
        self._answers()
        return super().get_prefix(prefix, keys_only)

    def commit(self, txn: Txn) -> int | None:
        self._answers()
        return super().commit(txn)

    def grant(self, ttl: int) -> int:
        self._answers()
        return super().grant(ttl)

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        self._answers()
        return super().keep_alive(lease_id, timeout)

    def script_watch(self, prefix: str, *responses: list[Any],
                     fault: Exception | None = None) -> None:
        """What the next subscription to `prefix` delivers: `responses` (lists of events)."""
        self.scripts[prefix].put((list(responses), fault))

    def _watch(self, prefix: str, start_revision: int,
               progress_notify: bool = False) -> tuple[Any, Callable[[], None]]:
        self.watched_from.append((prefix, start_revision))
        try:
            responses, fault = self.scripts[prefix].get_nowait()
        except queue.Empty:
            responses, fault = [], None
        cancelled = threading.Event()

        def stream() -> Any:
            for events in responses:
                yield SimpleNamespace(events=events)
            if fault is not None:
                raise fault
            while not (cancelled.wait(0.01) or self._all_cancelled.is_set()):
                pass
        return stream(), cancelled.set

    def cancel_watches(self) -> None:
        """End every watch, now and to come (what closing the connection does)."""
        self._all_cancelled.set()

    def close(self) -> None:
        self.closed = True
        self.cancel_watches()


def put_event(key: str, value: bytes, revision: int) -> pyetcd.events.PutEvent:
    return pyetcd.events.PutEvent(SimpleNamespace(kv=SimpleNamespace(
        key=key.encode(), value=value, mod_revision=revision)))


def delete_event(key: str, revision: int) -> pyetcd.events.DeleteEvent:
    return pyetcd.events.DeleteEvent(SimpleNamespace(kv=SimpleNamespace(
        key=key.encode(), value=b"", mod_revision=revision)))


# ---------------------------------------------------------------------- Placement


class FakePlacement:
    """Providers, inventories, traits, aggregates and allocations, with Placement's checks."""

    def __init__(self) -> None:
        self.providers: dict[str, dict[str, Any]] = {}
        # consumer -> {"allocations": {rp: {"resources": {...}}}, "consumer_generation": n}
        self.consumers: dict[str, dict[str, Any]] = {}
        self.conflicts = 0
        self.calls: list[str] = []

    # providers
    def ensure_provider(self, uuid: str, name: str) -> dict[str, Any]:
        provider = self.providers.setdefault(uuid, {"uuid": uuid, "name": name, "generation": 0,
                                                    "inventories": {}, "traits": set(),
                                                    "aggregates": []})
        provider["name"] = name
        return provider

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        return self.providers.get(uuid)

    def list_providers(self, **filters: Any) -> list[dict[str, Any]]:
        return [{"uuid": p["uuid"], "name": p["name"], "generation": p["generation"]}
                for p in self.providers.values()
                if ("name" not in filters or p["name"] == filters["name"]) and
                ("member_of" not in filters or
                 set(filters["member_of"].removeprefix("in:").split(","))
                 & set(p.get("aggregates", ())))]

    def delete_provider(self, uuid: str) -> None:
        self.providers.pop(uuid, None)

    def _bump(self, uuid: str) -> int:
        if uuid not in self.providers:
            raise NotFound(f"resource provider {uuid} does not exist")
        self.providers[uuid]["generation"] += 1
        return self.providers[uuid]["generation"]

    def set_inventory(self, uuid: str, inventories: dict[str, dict[str, Any]],
                      generation: int | None = None) -> int:
        self.calls.append(f"set_inventory {uuid}")
        full = {rc: {"reserved": 0, "allocation_ratio": 1.0, **inv}
                for rc, inv in inventories.items()}
        self.providers[uuid]["inventories"] = full
        return self._bump(uuid)

    def get_inventories(self, uuid: str) -> dict[str, dict[str, Any]]:
        return self.providers[uuid]["inventories"]

    def set_traits(self, uuid: str, traits: set[str], generation: int | None = None) -> int:
        self.providers[uuid]["traits"] = set(traits)
        return self._bump(uuid)

    def get_traits(self, uuid: str) -> set[str]:
        return set(self.providers[uuid]["traits"])

    def set_aggregates(self, uuid: str, aggregates: list[str],
                       generation: int | None = None) -> int:
        self.providers[uuid]["aggregates"] = sorted(aggregates)
        return self._bump(uuid)

    def get_aggregates(self, uuid: str) -> list[str]:
        if uuid not in self.providers:
            raise NotFound(f"resource provider {uuid} does not exist")
        return list(self.providers[uuid]["aggregates"])

    def change_aggregates(self, uuid: str, add: Any = (), remove: Any = ()) -> list[str]:
        wanted = sorted((set(self.get_aggregates(uuid)) | set(add)) - set(remove))
        if wanted != self.providers[uuid]["aggregates"]:
            self.providers[uuid]["aggregates"] = wanted
            self._bump(uuid)
        return wanted

    def known_traits(self, traits: set[str]) -> set[str]:
        return {t for t in traits if t.startswith(("HW_", "COMPUTE_", "MISC_", "CUSTOM_"))}

    def ensure_custom_traits(self, traits: set[str]) -> None:
        return None

    # usage and claims
    def get_usages(self, uuid: str) -> dict[str, int]:
        used = {rc: 0 for rc in self.providers[uuid]["inventories"]}
        for consumer in self.consumers.values():
            for rc, amount in consumer["allocations"].get(uuid, {}).get("resources", {}).items():
                used[rc] = used.get(rc, 0) + amount
        return used

    def capacity(self, uuid: str, rc: str) -> int:
        inv = self.providers[uuid]["inventories"].get(rc)
        if inv is None:
            return 0
        return int((inv["total"] - inv["reserved"]) * inv["allocation_ratio"])

    def _fits(self, claims: dict[str, dict[str, Any]]) -> bool:
        used: dict[tuple[str, str], int] = {}
        for consumer, data in self.consumers.items():
            if consumer in claims:
                continue  # replaced by the new allocations
            for rp, alloc in data["allocations"].items():
                for rc, amount in alloc["resources"].items():
                    used[rp, rc] = used.get((rp, rc), 0) + amount
        for allocations in claims.values():
            for rp, alloc in allocations.items():
                if rp not in self.providers:
                    return False
                for rc, amount in alloc["resources"].items():
                    used[rp, rc] = used.get((rp, rc), 0) + amount
                    if used[rp, rc] > self.capacity(rp, rc):
                        return False
        return True

    def _conflict(self, message: str, code: str) -> ConflictError:
        self.conflicts += 1
        return ConflictError(message, 409, code)

    def claim(self, consumer: str, allocations: dict[str, Any], project_id: str, user_id: str,
              consumer_type: str = "INSTANCE", consumer_generation: int | None = None) -> None:
        self.calls.append(f"claim {consumer}")
        current = self.consumers.get(consumer)
        expected = current["consumer_generation"] if current else None
        if consumer_generation != expected:
            raise self._conflict(f"consumer generation {consumer_generation} != {expected}",
                                 "placement.concurrent_update")
        if not self._fits({consumer: allocations}):
            raise self._conflict("not enough capacity", "placement.undefined_code")
        self.consumers[consumer] = {"allocations": allocations,
                                    "consumer_generation": (expected or 0) + 1,
                                    "project_id": project_id, "user_id": user_id,
                                    "consumer_type": consumer_type}

    def claim_many(self, claims: dict[str, dict[str, Any]], project_id: str, user_id: str,
                   consumer_type: str = "INSTANCE",
                   owners: dict[str, tuple[str, str]] | None = None) -> None:
        self.calls.append(f"claim_many {len(claims)}")
        if any(c in self.consumers for c in claims):
            raise self._conflict("consumer exists", "placement.concurrent_update")
        if not self._fits(claims):
            raise self._conflict("not enough capacity", "placement.undefined_code")
        for consumer, allocations in claims.items():
            project, user = (owners or {}).get(consumer, (project_id, user_id))
            self.consumers[consumer] = {"allocations": allocations, "consumer_generation": 1,
                                        "project_id": project, "user_id": user,
                                        "consumer_type": consumer_type}

    def project_usages(self, project_id: str, consumer_type: str,
                       user_id: str | None = None) -> dict[str, int]:
        """GET /usages?project_id=...&consumer_type=...: totals and consumer_count."""
        usages: dict[str, int] = {}
        for consumer in self.consumers.values():
            if consumer["project_id"] != project_id or \
                    (user_id is not None and consumer["user_id"] != user_id):
                continue
            if not consumer["allocations"] or \
                    consumer.get("consumer_type", "INSTANCE") != consumer_type:
                continue
            usages["consumer_count"] = usages.get("consumer_count", 0) + 1
            for allocation in consumer["allocations"].values():
                for rc, amount in allocation["resources"].items():
                    usages[rc] = usages.get(rc, 0) + amount
        return usages

    def replace_many(self, claims: dict[str, dict[str, Any]],
                     consumer_type: str = "INSTANCE") -> None:
        """POST /allocations with a generation per consumer: all or nothing."""
        self.calls.append(f"replace_many {len(claims)}")
        for consumer, claim in claims.items():
            current = self.consumers.get(consumer)
            expected = current["consumer_generation"] if current else None
            if claim["consumer_generation"] != expected:
                raise self._conflict(f"consumer generation {claim['consumer_generation']} != "
                                     f"{expected}", "placement.concurrent_update")
        if not self._fits({c: claim["allocations"] for c, claim in claims.items()}):
            raise self._conflict("not enough capacity", "placement.undefined_code")
        for consumer, claim in claims.items():
            current = self.consumers.get(consumer)
            if not claim["allocations"]:  # Placement frees the consumer
                self.consumers.pop(consumer, None)
                continue
            self.consumers[consumer] = {
                "allocations": claim["allocations"],
                "consumer_generation": (current["consumer_generation"] if current else 0) + 1,
                "project_id": claim["project_id"], "user_id": claim["user_id"],
                "consumer_type": claim.get("consumer_type", consumer_type)}

    def replace_allocations(self, consumer: str, allocations: dict[str, Any],
                            consumer_generation: int | None, project_id: str, user_id: str,
                            consumer_type: str = "INSTANCE") -> None:
        if not allocations:
            current = self.consumers.get(consumer)
            expected = current["consumer_generation"] if current else None
            if consumer_generation != expected:
                raise self._conflict(f"consumer generation {consumer_generation} != "
                                     f"{expected}", "placement.concurrent_update")
            self.calls.append(f"replace_allocations {consumer} {{}}")
            self.consumers.pop(consumer, None)
            return
        self.claim(consumer, allocations, project_id, user_id, consumer_type,
                   consumer_generation)

    def get_allocations(self, consumer: str) -> dict[str, Any]:
        data = self.consumers.get(consumer)
        if data is None:
            return {"allocations": {}}
        return {"allocations": data["allocations"],
                "consumer_generation": data["consumer_generation"],
                "project_id": data.get("project_id", "p"), "user_id": data.get("user_id", "u")}

    def delete_allocations(self, consumer: str) -> bool:
        self.calls.append(f"delete_allocations {consumer}")
        return self.consumers.pop(consumer, None) is not None

    # candidates: resources, required (all, !forbidden, in:any), member_of (in:, !), in_tree
    # (every provider is a root here), limit; no granular groups or group_policy
    def allocation_candidates(self, query: str) -> dict[str, Any]:
        params = parse_qsl(query)
        resources: dict[str, int] = {}
        required: set[str] = set()
        forbidden: set[str] = set()
        any_of: list[set[str]] = []
        member_of: list[set[str]] = []
        not_member_of: set[str] = set()
        limit = tree = None
        for key, value in params:
            if key == "resources":
                for pair in value.split(","):
                    rc, amount = pair.split(":")
                    resources[rc] = int(amount)
            elif key == "required" and value.startswith("in:"):
                any_of.append(set(value[3:].split(",")))
            elif key in ("required", "root_required"):  # (every provider is a root here)
                for trait in value.split(","):
                    (forbidden if trait.startswith("!") else required).add(trait.lstrip("!"))
            elif key == "member_of" and value.startswith("!"):
                not_member_of.update(value[1:].removeprefix("in:").split(","))
            elif key == "member_of":
                member_of.append(set(value.removeprefix("in:").split(",")))
            elif key == "in_tree":
                tree = value
            elif key == "limit":
                limit = int(value)
        requests, summaries = [], {}
        for uuid, provider in self.providers.items():
            if tree is not None and uuid != tree:
                continue
            used = self.get_usages(uuid)
            if any(self.capacity(uuid, rc) - used.get(rc, 0) < n for rc, n in resources.items()):
                continue
            traits = provider["traits"]
            if not required <= traits or forbidden & traits:
                continue
            if any(not (wanted & traits) for wanted in any_of):
                continue
            aggregates = set(provider["aggregates"])
            if any(not (wanted & aggregates) for wanted in member_of) or \
                    not_member_of & aggregates:
                continue
            requests.append({"allocations": {uuid: {"resources": dict(resources)}}})
            summaries[uuid] = {
                "resources": {rc: {"capacity": self.capacity(uuid, rc), "used": used.get(rc, 0)}
                              for rc in provider["inventories"]},
                "traits": sorted(traits), "root_provider_uuid": uuid,
                "parent_provider_uuid": None,
            }
        if limit is not None:
            requests = requests[:limit]
            kept = {rp for r in requests for rp in r["allocations"]}
            summaries = {rp: s for rp, s in summaries.items() if rp in kept}
        return {"allocation_requests": requests, "provider_summaries": summaries}


# ---------------------------------------------------------------------- the pool


class FakePool:
    """The worker pool, run in-process: jobs wait until the test runs them (or cancels them)."""

    def __init__(self) -> None:
        self.pending: list[tuple[concurrent.futures.Future, Callable[..., Any],
                                 tuple[Any, ...]]] = []
        self.replaced: list[str] = []
        self.is_healthy = True
        self.stopped = False

    def schedule(self, function: Callable[..., Any], *args: Any,
                 timeout: float) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.pending.append((future, function, args))
        return future

    def run(self, function: Callable[..., Any], *args: Any, timeout: float = 60) -> Any:
        return function(*args)

    def run_next(self) -> bool:
        """Run the oldest pending job; False if there is none."""
        while self.pending:
            future, function, args = self.pending.pop(0)
            if not future.set_running_or_notify_cancel():
                continue  # cancelled meanwhile
            try:
                future.set_result(function(*args))
            except Exception as exc:  # noqa: BLE001 (the job's outcome, as a worker reports it)
                future.set_exception(exc)
            return True
        return False

    def fail_next(self, exc: BaseException) -> None:
        """End the oldest pending job with `exc` (a timeout, a dead worker...)."""
        future, _function, _args = self.pending.pop(0)
        future.set_running_or_notify_cancel()
        future.set_exception(exc)

    def healthy(self) -> bool:
        return self.is_healthy

    def replace(self, why: str) -> None:
        self.replaced.append(why)
        self.is_healthy = True

    def stop(self, join_timeout: float = 5) -> None:
        self.stopped = True

    def start(self) -> FakePool:
        self.stopped = False
        return self


class EventLoop:
    """The daemon's main loop in miniature: `post` queues, `drain` runs until quiet."""

    def __init__(self) -> None:
        self.queue: list[tuple[Callable[..., None], tuple[Any, ...]]] = []

    def post(self, handler: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        self.queue.append((handler, args))

    def drain(self, pool: FakePool | None = None, limit: int = 1000) -> None:
        """Run queued events, and pool jobs as they come, until nothing is left."""
        for _ in range(limit):
            if self.queue:
                handler, args = self.queue.pop(0)
                handler(*args)
            elif pool is not None and pool.run_next():
                continue
            else:
                return
        raise AssertionError("event loop did not settle")


class RpcError(grpc.RpcError, grpc.Call):
    """What gRPC raises: an RpcError that is also a Call with code() and details()."""

    def __init__(self, code: grpc.StatusCode, details: str = ""):
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details
