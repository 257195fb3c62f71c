"""pyetcd's multi-endpoint client, made to move on from a member it cannot reach.

pyetcd moves off an endpoint only while it is marked failed, for `time_retry`
seconds after a failure; we set that to 0 (see etcd.py: a restarted single
etcd must be usable again at once), and then it never moved at all. A client
whose member died failed every call until that member came back, while the
rest of the cluster served. Here every call, watch or lease keep-alive that
found its member unreachable moves the client to the next endpoint. Also here:
what counts as unreachable (`ETCD_DOWN`, `unreachable`), and when a failed
write certainly never left (`never_sent`), so `Store` may send it elsewhere.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pyetcd
import pyetcd.exceptions
from pyetcd import etcdrpc

# What a dead or restarting etcd looks like through pyetcd.
ETCD_DOWN = (
    pyetcd.exceptions.ConnectionFailedError,
    pyetcd.exceptions.ConnectionTimeoutError,
    pyetcd.exceptions.InternalServerError,
    pyetcd.exceptions.NoServerAvailableError,
    pyetcd.exceptions.WatchTimedOut,
    grpc.RpcError,
)

# gRPC codes that mean "etcd is not there (now)", as opposed to "etcd refused this".
UNREACHABLE_CODES = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


# What a member that cannot answer now (no quorum, no leader) says besides those codes: it
# lets the request's own deadline pass, and gRPC reports etcd's bare context error as UNKNOWN
# ("etcd refused the request: UNKNOWN: context deadline exceeded" was an exit 1, not a 3).
UNREACHABLE_DETAILS = ("context deadline exceeded", "context canceled")


def _grpc_cause(exc: BaseException) -> Any:
    """The gRPC error behind `exc` (pyetcd raises its own exception from inside gRPC's)."""
    return exc if hasattr(exc, "details") else exc.__context__


def grpc_status(exc: BaseException) -> tuple[grpc.StatusCode | None, str]:
    """The gRPC code (None if there is none) and details behind `exc`."""
    cause = _grpc_cause(exc)
    code = cause.code() if hasattr(cause, "code") else None
    details = (cause.details() or "") if hasattr(cause, "details") else ""
    return code, details


def unreachable_status(code: grpc.StatusCode | None, details: str) -> bool:
    """The one rule for "etcd is not there (now)" as opposed to "etcd refused this"."""
    if code is None or code in UNREACHABLE_CODES:
        return True
    return code == grpc.StatusCode.UNKNOWN and \
        any(text in details for text in UNREACHABLE_DETAILS)


def unreachable(exc: BaseException) -> bool:
    """`exc` says the member could not be reached (now), not that etcd refused the call."""
    if not isinstance(exc, ETCD_DOWN):
        return False
    return unreachable_status(*grpc_status(exc))


def never_sent(exc: BaseException) -> bool:
    """gRPC could not even connect to the member: the request never left, so sending it
    to another member cannot apply it twice."""
    return unreachable(exc) and "failed to connect" in grpc_status(exc)[1]


# gRPC codes after which the member asked is left for the next one (pyetcd's own list).
FAILOVER_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
                  grpc.StatusCode.INTERNAL)


class FailoverClient(pyetcd.MultiEndpointEtcd3Client):
    def __init__(self, *args: Any, **kwargs: Any):
        self._move_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def next_endpoint(self) -> None:
        """Use the next endpoint (round robin) from the next call on."""
        with self._move_lock:
            labels = list(self.endpoints)
            if len(labels) > 1:
                current = labels.index(self._current_endpoint_label)
                self._current_endpoint_label = labels[(current + 1) % len(labels)]

    def _manage_grpc_errors(self, exc: grpc.RpcError) -> None:
        # pyetcd routes every gRPC error of calls, watches and keep-alives through here.
        if exc.code() in FAILOVER_CODES or unreachable_status(*grpc_status(exc)):
            self.next_endpoint()
        super()._manage_grpc_errors(exc)

    def add_watch_callback(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().add_watch_callback(*args, **kwargs)
        except pyetcd.exceptions.WatchTimedOut:
            # The member did not even confirm the watch (silent, no error): the next one.
            self.next_endpoint()
            raise

    def keep_alive(self, lease_id: int, timeout: float) -> int:
        """One keep-alive of a lease, within `timeout` (pyetcd's own uses the client's
        timeout, which may be most of the lease's TTL); the TTL etcd gives it now, 0 when
        the lease is gone."""
        request = etcdrpc.LeaseKeepAliveRequest(ID=lease_id)
        try:
            for response in self.leasestub.LeaseKeepAlive(
                    iter([request]), timeout, credentials=self.call_credentials,
                    metadata=self.metadata):
                return int(response.TTL)
        except grpc.RpcError as exc:
            self._manage_grpc_errors(exc)
        return 0
