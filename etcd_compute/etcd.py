"""The etcd connection and the few operations we build everything from.

We use `etcd-sdk-python` (imported as `pyetcd`): it keeps the API of the old
`etcd3` package, which is unmaintained and breaks with current protobuf.
Its default client refuses every call for 300 s after one failure
(`time_retry`); we set it to 0 and keep gRPC's reconnect backoff short so a
restarted etcd is usable again within a second.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pyetcd
import pyetcd.exceptions

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage, ServiceUnavailable
from etcd_compute.keys import Keys

GRPC_OPTIONS = [("grpc.max_reconnect_backoff_ms", 1000), ("grpc.initial_reconnect_backoff_ms", 100)]

# What a dead or restarting etcd looks like through pyetcd.
ETCD_DOWN = (
    pyetcd.exceptions.ConnectionFailedError,
    pyetcd.exceptions.ConnectionTimeoutError,
    pyetcd.exceptions.InternalServerError,
    pyetcd.exceptions.NoServerAvailableError,
    grpc.RpcError,
)


def connect(etcd_config: dict[str, Any]) -> pyetcd.MultiEndpointEtcd3Client:
    endpoints = []
    for endpoint in etcd_config["endpoints"]:
        host, port = endpoint.rsplit(":", 1)
        endpoints.append(
            pyetcd.Endpoint(host, int(port), secure=False, time_retry=0, opts=GRPC_OPTIONS)
        )
    return pyetcd.MultiEndpointEtcd3Client(
        endpoints=endpoints, timeout=etcd_config["timeout"], failover=True
    )


# gRPC codes that mean "etcd is not there (now)", as opposed to "etcd refused this".
UNREACHABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


@contextlib.contextmanager
def etcd_errors(endpoints: list[str]) -> Iterator[None]:
    """Turn pyetcd/gRPC failures into one-line errors."""
    try:
        yield
    except ETCD_DOWN as exc:
        code = exc.code() if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") else None
        if code is not None and code not in UNREACHABLE_CODES:
            details = exc.details() if hasattr(exc, "details") else ""
            raise EtcdComputeError(f"etcd refused the request: {code.name}: {details}") from None
        raise ServiceUnavailable(
            f"etcd at {', '.join(endpoints)} is unreachable "
            f"({code.name if code else exc.__class__.__name__}); "
            "check that etcd runs and etcd.endpoints in the config"
        ) from None


@dataclass
class Entry:
    """One key as read from etcd."""

    key: str
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int = 0


class Store:
    """An etcd client bound to our key layout and message schemas."""

    def __init__(self, etcd_config: dict[str, Any]):
        self.endpoints = list(etcd_config["endpoints"])
        self.keys = Keys(etcd_config["prefix"])
        self.client = connect(etcd_config)
        self.tx = self.client.transactions

    def errors(self) -> contextlib.AbstractContextManager[None]:
        return etcd_errors(self.endpoints)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- reads -------------------------------------------------------------

    def get(self, key: str) -> Entry | None:
        with self.errors():
            value, meta = self.client.get(key)
        if value is None:
            return None
        return Entry(key, value, meta.mod_revision, meta.create_revision, meta.lease_id)

    def get_prefix(self, prefix: str, keys_only: bool = False) -> tuple[list[Entry], int]:
        """All entries under `prefix` and the store revision they were read at."""
        with self.errors():
            response = self.client.get_prefix_response(prefix, keys_only=keys_only)
        entries = [
            Entry(kv.key.decode(), kv.value, kv.mod_revision, kv.create_revision, kv.lease)
            for kv in response.kvs
        ]
        return entries, response.header.revision

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

    # --- writes ------------------------------------------------------------

    def put(self, schema: str, key: str, message: dict[str, Any], lease: Any = None) -> None:
        value = messages.encode(schema, message)
        with self.errors():
            self.client.put(key, value, lease=lease)

    def put_op(self, schema: str, key: str, message: dict[str, Any], lease: Any = None) -> Any:
        """A put for a transaction (validated now, like `put`)."""
        return self.tx.put(key, messages.encode(schema, message), lease=lease)

    def delete_op(self, key: str) -> Any:
        return self.tx.delete(key)

    def transaction(self, compare: list[Any], success: list[Any],
                    failure: list[Any] | None = None) -> int | None:
        """Run a transaction: the revision it wrote at, or None if a comparison failed."""
        with self.errors():
            succeeded, responses = self.client.transaction(
                compare=compare, success=success, failure=failure or []
            )
        if not succeeded:
            return None
        for response in responses:
            kind = response.WhichOneof("response") if hasattr(response, "WhichOneof") else None
            if kind:
                return getattr(response, kind).header.revision
        return 0

    def delete(self, key: str) -> None:
        with self.errors():
            self.client.delete(key)

    def lease(self, ttl: int) -> Any:
        with self.errors():
            return self.client.lease(ttl)

    # --- comparisons for transactions ---------------------------------------

    def absent(self, key: str) -> Any:
        return self.tx.version(key) == 0

    def unchanged(self, key: str, mod_revision: int) -> Any:
        """True when `key` is still at `mod_revision` (0: still absent)."""
        if mod_revision == 0:
            return self.absent(key)
        return self.tx.mod(key) == mod_revision

