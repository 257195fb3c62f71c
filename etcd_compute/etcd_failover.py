"""pyetcd's multi-endpoint client, made to move on from a member it cannot reach.

pyetcd moves off an endpoint only while it is marked failed, for `time_retry`
seconds after a failure; we set that to 0 (see etcd.py: a restarted single
etcd must be usable again at once), and then it never moved at all. A client
whose member died failed every call until that member came back, while the
rest of the cluster served. Here every call, watch or lease keep-alive that
found its member unreachable moves the client to the next endpoint.
"""

from __future__ import annotations

import threading
from typing import Any

import grpc
import pyetcd

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
        if exc.code() in FAILOVER_CODES:
            self.next_endpoint()
        super()._manage_grpc_errors(exc)
