"""The etcd store: the few operations we build everything from, over one connection.

We use `etcd-sdk-python` (imported as `pyetcd`): it keeps the API of the old
`etcd3` package, which is unmaintained and breaks with current protobuf.
Its default client refuses every call for 300 s after one failure
(`time_retry`); we set it to 0 and keep gRPC's reconnect backoff short so a
restarted etcd is usable again within a second. With `time_retry` 0 pyetcd
never leaves a failed member either, so `FailoverClient` moves to the next
endpoint after every call that found its member unreachable, and `Store`
retries a call on the next member when that cannot do a write twice.

Connecting (TLS, gRPC's options) and turning its failures into one-line errors:
`etcd_connection.py`.

Transactions are written with our own small types (`Compare`, `Put`,
`Delete`, `Txn`) and translated to pyetcd's only here, so the code that
builds them (the instance model) can be tested against an in-memory store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pyetcd
import pyetcd.exceptions
import pyetcd.transactions
from pyetcd import etcdrpc

from etcd_compute import messages
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd_connection import connect, etcd_errors
from etcd_compute.etcd_failover import ETCD_DOWN, never_sent, unreachable
from etcd_compute.keys import Keys


@dataclass
class Entry:
    """One key as read from etcd."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


@dataclass(frozen=True)
class Range:
    """One read of several (`KeyValueStore.read_many`): the key, or every key under it
    (`prefix`); `count_only` answers how many without any key."""

    key: str
    prefix: bool = True
    keys_only: bool = False
    count_only: bool = False


@dataclass
class RangeResult:
    entries: list[Entry]
    count: int


# --- transactions, in our own terms ------------------------------------------------------


@dataclass(frozen=True)
class Compare:
    """`target` of `key` (or of every key in [key, range_end)) `op` `value`.

    target: "mod" (mod_revision), "create" (create_revision) or "version".
    """

    key: str
    target: str
    op: str
    value: int
    range_end: str | None = None


@dataclass(frozen=True)
class Put:
    key: str
    value: str
    lease: int | None = None


@dataclass(frozen=True)
class Delete:
    key: str


Op = Put | Delete


@dataclass
class Txn:
    """Compares that must all hold, and the writes done (atomically) when they do."""

    compare: list[Compare] = field(default_factory=list)
    success: list[Op] = field(default_factory=list)

    def __add__(self, other: Txn) -> Txn:
        return Txn(self.compare + other.compare, self.success + other.success)

    def size(self) -> int:
        """About how many bytes the request is on the wire (etcd refuses requests over its
        --max-request-bytes, 1.5 MiB by default)."""
        total = sum(len(c.key) + len(c.range_end or "") + 16 for c in self.compare)
        for op in self.success:
            value = op.value if isinstance(op, Put) else ""
            total += len(op.key) + len(value.encode() if isinstance(value, str) else value) + 16
        return total


def absent(key: str) -> Compare:
    return Compare(key, "version", "==", 0)


def unchanged(key: str, mod_revision: int) -> Compare:
    """True when `key` is still at `mod_revision` (0: still absent)."""
    return absent(key) if mod_revision == 0 else Compare(key, "mod", "==", mod_revision)


def prefix_end(prefix: str) -> str:
    """The first key after every key starting with `prefix` (etcd's range_end)."""
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


def none_created_since(prefix: str, revision: int) -> Compare:
    """Every key under `prefix` was created at or before `revision` (an empty range passes)."""
    return Compare(prefix, "create", "<", revision + 1, prefix_end(prefix))


def put_message(schema: str, key: str, message: dict[str, Any], lease: int | None = None) -> Put:
    """A put of a schema-checked message (validated now, like `Store.put`)."""
    return Put(key, messages.encode(schema, message), lease)


_TARGETS = {"mod": pyetcd.transactions.Mod, "create": pyetcd.transactions.Create,
            "version": pyetcd.transactions.Version}


def _to_pyetcd_compare(compare: Compare) -> Any:
    target = _TARGETS[compare.target](compare.key, compare.range_end)
    return {"==": target.__eq__, "!=": target.__ne__, "<": target.__lt__,
            ">": target.__gt__}[compare.op](compare.value)


def _to_pyetcd_op(op: Op) -> Any:
    if isinstance(op, Put):
        return pyetcd.transactions.Put(op.key, op.value, lease=op.lease)
    return pyetcd.transactions.Delete(op.key)


class KeyValueStore:
    """Reads and writes of schema-checked messages, over four primitives a subclass provides:
    `get`, `get_prefix`, `commit` and `grant` (etcd here; an in-memory store in unit tests)."""

    keys: Keys

    def get(self, key: str) -> Entry | None:
        raise NotImplementedError

    def get_prefix(self, prefix: str, keys_only: bool = False) -> tuple[list[Entry], int]:
        """All entries under `prefix` and the store revision they were read at."""
        raise NotImplementedError

    def commit(self, txn: Txn) -> int | None:
        """Run `txn`: the revision it wrote at, or None if a comparison failed."""
        raise NotImplementedError

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        """Refresh a lease, each try within `timeout`; the TTL it has now (<= 0: gone).
        Repeatable, so a silent member costs `timeout`, then the next member is asked."""
        return int(self._rpc(lambda client: client.keep_alive(lease_id, timeout)))

    def grant(self, ttl: int) -> int:
        """The id of a new lease of `ttl` seconds, for keys that expire on their own."""
        raise NotImplementedError

    def read_many(self, ranges: list[Range]) -> tuple[list[RangeResult], int]:
        """Several reads at one revision (etcd: one round trip), and that revision."""
        results, revision = [], 0
        for read in ranges:
            if read.prefix:
                entries, revision = self.get_prefix(read.key, keys_only=read.keys_only)
            else:
                entry = self.get(read.key)
                entries = [entry] if entry is not None else []
            results.append(RangeResult([] if read.count_only else entries, len(entries)))
        return results, revision

    def read(self, schema: str, key: str) -> tuple[dict[str, Any] | None, int]:
        """(message, mod_revision), or (None, 0) when the key does not exist.

        Raises InvalidMessage when the stored value breaks its schema.
        """
        entry = self.get(key)
        if entry is None:
            return None, 0
        return messages.decode(schema, entry.value), entry.mod_revision

    def read_prefix(self, schema: str, prefix: str) -> dict[str, dict[str, Any]]:
        """Messages under `prefix` keyed by the last key segment; invalid ones are skipped."""
        entries, _ = self.get_prefix(prefix)
        found = {}
        for entry in entries:
            with contextlib.suppress(InvalidMessage):
                found[entry.key.rsplit("/", 1)[-1]] = messages.decode(schema, entry.value)
        return found

    def put(self, schema: str, key: str, message: dict[str, Any], lease: Any = None) -> None:
        """Write one message (`lease`: a lease id or pyetcd Lease the key expires with)."""
        lease_id = getattr(lease, "id", lease)
        self.commit(Txn([], [put_message(schema, key, message, lease_id)]))

    def delete(self, key: str) -> None:
        self.commit(Txn([], [Delete(key)]))


class Store(KeyValueStore):
    """An etcd client bound to our key layout and message schemas."""

    def __init__(self, etcd_config: dict[str, Any]):
        self.config = etcd_config
        self.endpoints = list(etcd_config["endpoints"])
        self.keys = Keys(etcd_config["prefix"])
        self.client = connect(etcd_config)

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return etcd_errors(self.endpoints)

    def _rpc(self, call: Callable[[Any], Any], repeatable: bool = True) -> Any:
        """`call(client)`, with one-line errors.

        When the member asked is unreachable the client has moved on, and the call is tried
        on the next member (each once): a dead member costs a refused connection, not a
        failed command. A call that is not `repeatable` (a write) goes again only if it
        never left (no connection). Once the tries so far took half of etcd.timeout or more
        (a member that could not answer: no quorum, cut off; or refusals slowed by a loaded
        machine), none is added: it may wait a whole timeout. So a call fails within 1.5
        timeouts when no member can answer (a lost quorum)."""
        timeout = self.config.get("timeout", 5.0)
        started = time.monotonic()
        tries = len(self.endpoints)
        with self.errors():
            while True:
                tries -= 1
                try:
                    return self._call_authenticated(call)
                except ETCD_DOWN as exc:
                    if tries <= 0 or time.monotonic() - started >= timeout / 2 \
                            or not unreachable(exc) or not (repeatable or never_sent(exc)):
                        raise

    def _call_authenticated(self, call: Callable[[Any], Any]) -> Any:
        """A password user whose token another member does not know (etcd's simple tokens
        live in one member) authenticates again, once."""
        try:
            return call(self.client)
        except grpc.RpcError as exc:
            if not self.config.get("user") or exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                raise
        self.close()
        self.client = connect(self.config)
        return call(self.client)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def get(self, key: str) -> Entry | None:
        value, meta = self._rpc(lambda client: client.get(key))
        if value is None:
            return None
        return Entry(key, value, meta.mod_revision, meta.create_revision, meta.lease_id)

    def get_prefix(self, prefix: str, keys_only: bool = False) -> tuple[list[Entry], int]:
        response = self._rpc(
            lambda client: client.get_prefix_response(prefix, keys_only=keys_only))
        entries = [
            Entry(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision, kv.lease)
            for kv in response.kvs
        ]
        return entries, response.header.revision

    def read_many(self, ranges: list[Range]) -> tuple[list[RangeResult], int]:
        """One etcd transaction of range requests: one round trip, one revision. (pyetcd's
        transaction cannot ask for keys or counts only, so the request is built here.)"""
        if not ranges:
            return [], 0

        def request(read: Range) -> Any:
            key = read.key.encode()
            return etcdrpc.RequestOp(request_range=etcdrpc.RangeRequest(
                key=key, range_end=prefix_end(read.key).encode() if read.prefix else b"",
                keys_only=read.keys_only, count_only=read.count_only))

        def call(client: Any) -> Any:
            txn = etcdrpc.TxnRequest(success=[request(read) for read in ranges])
            try:
                return client.kvstub.Txn(txn, client.timeout,
                                         credentials=client.call_credentials,
                                         metadata=client.metadata)
            except grpc.RpcError as exc:
                # pyetcd's own handling: marks a dead endpoint failed, raises its exception.
                client._manage_grpc_errors(exc)

        response = self._rpc(call)
        results = []
        for item in response.responses:
            answer = item.response_range
            results.append(RangeResult(
                [Entry(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision,
                       kv.lease) for kv in answer.kvs], answer.count))
        return results, response.header.revision

    def commit(self, txn: Txn) -> int | None:
        succeeded, responses = self._rpc(lambda client: client.transaction(
            compare=[_to_pyetcd_compare(c) for c in txn.compare],
            success=[_to_pyetcd_op(op) for op in txn.success],
            failure=[],
        ), repeatable=False)
        if not succeeded:
            return None
        for response in responses:
            kind = response.WhichOneof("response") if hasattr(response, "WhichOneof") else None
            if kind:
                return getattr(response, kind).header.revision
        return 0

    def lease(self, ttl: int) -> Any:
        """A new lease (pyetcd's Lease: `.id`, `.refresh()`, `.revoke()`). Repeatable: a
        lease granted twice leaves one unused, which etcd drops after `ttl`."""
        return self._rpc(lambda client: client.lease(ttl))

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        """Refresh a lease, each try within `timeout`; the TTL it has now (<= 0: gone).
        Repeatable, so a silent member costs `timeout`, then the next member is asked."""
        return int(self._rpc(lambda client: client.keep_alive(lease_id, timeout)))

    def grant(self, ttl: int) -> int:
        return int(self.lease(ttl).id)


class SharedLease:
    """One lease for many short-lived keys (the scheduler service's answers, the compute
    API's external events): granted again once a quarter of `ttl` has passed, so each key
    lives at least 3/4 of `ttl` and at most `ttl`, for one grant per `ttl / 4` rather than
    one per key. Called from any thread."""

    def __init__(self, store: KeyValueStore, ttl: int, clock: Clock = SYSTEM):
        self.store, self.ttl, self.clock = store, ttl, clock
        self._lease: int | None = None
        self._granted = 0.0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            if self._lease is None or self.clock.now() - self._granted > self.ttl / 4:
                self._lease = self.store.grant(self.ttl)
                self._granted = self.clock.now()
            return self._lease
