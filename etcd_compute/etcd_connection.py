"""Connecting to etcd, and its failures as one-line errors.

`connect` opens a `FailoverClient` (etcd_failover.py: the next member after a failed
call) over gRPC with our options: a short reconnect backoff, and keepalive pings so that
a member that went silent ends its streams. TLS comes from etcd.ca_cert/cert/key.
`etcd_errors` turns what pyetcd and gRPC raise into EtcdUnavailable (unreachable, or a
failed TLS handshake), PermissionDenied (etcd's RBAC) or EtcdComputeError (any other
refusal), each one line naming the endpoints, and counts it for the metrics.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pyetcd

from etcd_compute import metrics
from etcd_compute.errors import ConfigError, EtcdComputeError, EtcdUnavailable
from etcd_compute.etcd_failover import (
    ETCD_DOWN,
    FailoverClient,
    grpc_status,
    unreachable_status,
)

GRPC_OPTIONS = [
    ("grpc.max_reconnect_backoff_ms", 1000), ("grpc.initial_reconnect_backoff_ms", 100),
    # A member that vanished without a reset (partitioned, its host hung) would hold a watch
    # forever: nothing else ends a stream. Pings find that out; etcd refuses pings closer
    # than 5 s apart (--grpc-keepalive-min-time), and only on connections with calls.
    ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
]

def _read(setting: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"etcd.{setting} {path}: cannot read ({exc.strerror})") from None


def tls_credentials(etcd_config: dict[str, Any]) -> grpc.ChannelCredentials | None:
    """gRPC TLS credentials from etcd.ca_cert/cert/key, or None for plain TCP."""
    ca, cert, key = (etcd_config.get(name) for name in ("ca_cert", "cert", "key"))
    if not ca:
        if cert or key:
            raise ConfigError("etcd.cert and etcd.key need etcd.ca_cert (TLS)")
        return None
    if bool(cert) != bool(key):
        raise ConfigError("etcd.cert and etcd.key go together")
    return grpc.ssl_channel_credentials(
        _read("ca_cert", ca), _read("key", key) if key else None,
        _read("cert", cert) if cert else None)


def connect(etcd_config: dict[str, Any]) -> pyetcd.MultiEndpointEtcd3Client:
    credentials = tls_credentials(etcd_config)
    endpoints = []
    for endpoint in etcd_config["endpoints"]:
        host, port = endpoint.rsplit(":", 1)
        endpoints.append(pyetcd.Endpoint(host, int(port), secure=credentials is not None,
                                         creds=credentials, time_retry=0, opts=GRPC_OPTIONS))
    with etcd_errors(etcd_config["endpoints"]):
        # With a user and password this authenticates right away (a network call).
        return FailoverClient(
            endpoints=endpoints, timeout=etcd_config["timeout"], failover=True,
            user=etcd_config.get("user"), password=etcd_config.get("password"))


# What gRPC says when the TLS handshake, not the network, failed. A client
# certificate the server refuses shows only after the client's side of a TLS 1.3
# handshake is done, as gRPC's transport security failing to unwrap ("TSI_").
TLS_FAULTS = ("SSL", "ssl", "certificate", "handshake", "TLS", "tls", "TSI_")


class PermissionDenied(EtcdComputeError):
    """etcd refused a request for lack of permission (its RBAC)."""


@contextlib.contextmanager
def etcd_errors(endpoints: list[str]) -> Iterator[None]:
    """Turn pyetcd/gRPC failures into one-line errors."""
    try:
        yield
    except ETCD_DOWN as exc:
        metrics.backend_error("etcd")
        code = exc.code() if isinstance(exc, grpc.RpcError) and hasattr(exc, "code") else None
        # pyetcd raises its own exception from inside gRPC's; the details are in that one.
        details = " ".join(grpc_status(exc)[1].split())[:300]
        if code == grpc.StatusCode.PERMISSION_DENIED:
            raise PermissionDenied(f"etcd refused the request: PERMISSION_DENIED: "
                                   f"{details}") from None
        if not unreachable_status(code, details):
            raise EtcdComputeError(f"etcd refused the request: {code.name}: {details}") from None
        if any(fault in details for fault in TLS_FAULTS):
            raise EtcdUnavailable(
                f"etcd at {', '.join(endpoints)}: TLS handshake failed ({details}); check "
                "etcd.ca_cert/cert/key against the cluster CA") from None
        what = code.name if code else exc.__class__.__name__
        if code == grpc.StatusCode.UNKNOWN:
            what = f"no answer in time: {details}"  # a member without quorum, say
        raise EtcdUnavailable(
            f"etcd at {', '.join(endpoints)} is unreachable ({what}); "
            "check that etcd runs and etcd.endpoints in the config"
        ) from None
