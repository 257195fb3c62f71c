"""Connecting to etcd (etcd_connection.py): TLS settings checked before any connection, and
every failure of pyetcd or gRPC one line naming the endpoints: unreachable, a failed TLS
handshake, a refusal (RBAC or otherwise), counted for the metrics."""

from __future__ import annotations

import grpc
import pyetcd.exceptions
import pytest

from etcd_compute.errors import (
    ConfigError,
    EtcdComputeError,
    EtcdUnavailable,
    ServiceUnavailable,
)
from etcd_compute.etcd_connection import PermissionDenied, etcd_errors, tls_credentials
from tests.unit.fakes import RpcError

ENDPOINTS = ["10.0.0.1:2379", "10.0.0.2:2379"]


# ------------------------------------------------------------------ TLS settings


def test_plain_tcp_without_a_ca():
    assert tls_credentials({"endpoints": ENDPOINTS}) is None


@pytest.mark.parametrize(("settings", "fault"), [
    ({"cert": "c.crt", "key": "c.key"}, "need etcd.ca_cert"),
    ({"ca_cert": "ca.crt", "cert": "c.crt"}, "go together"),
    ({"ca_cert": "ca.crt", "key": "c.key"}, "go together"),
])
def test_a_certificate_without_its_ca_or_key_is_a_config_error(settings, fault):
    with pytest.raises(ConfigError, match=fault):
        tls_credentials(settings)


def test_an_unreadable_tls_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match=f"etcd.ca_cert {tmp_path}/none.crt: cannot read"):
        tls_credentials({"ca_cert": str(tmp_path / "none.crt")})


def test_tls_credentials_from_readable_files(tmp_path):
    for name in ("ca.crt", "c.crt", "c.key"):
        (tmp_path / name).write_text("PEM")
    credentials = tls_credentials({"ca_cert": str(tmp_path / "ca.crt"),
                                   "cert": str(tmp_path / "c.crt"),
                                   "key": str(tmp_path / "c.key")})
    assert isinstance(credentials, grpc.ChannelCredentials)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("code", [grpc.StatusCode.UNAVAILABLE,
                                  grpc.StatusCode.DEADLINE_EXCEEDED])
def test_an_unreachable_etcd_is_service_unavailable_naming_the_endpoints(code):
    with pytest.raises(ServiceUnavailable) as caught, etcd_errors(ENDPOINTS):
        raise RpcError(code, "connection refused")
    text = str(caught.value)
    assert caught.value.exit_code == 3
    assert "etcd at 10.0.0.1:2379, 10.0.0.2:2379 is unreachable" in text
    assert code.name in text and "\n" not in text


@pytest.mark.parametrize("details", ["context deadline exceeded", "context canceled"])
def test_a_member_without_quorum_letting_the_deadline_pass_is_unreachable_not_a_refusal(
        details):
    """What etcd 3.4 says with its quorum lost: UNKNOWN with its bare context error. It was
    "etcd refused the request: UNKNOWN: context deadline exceeded", exit 1 (issue 18)."""
    with pytest.raises(EtcdUnavailable) as caught, etcd_errors(ENDPOINTS):
        raise RpcError(grpc.StatusCode.UNKNOWN, details)
    assert caught.value.exit_code == 3
    assert str(caught.value).startswith(
        f"etcd at 10.0.0.1:2379, 10.0.0.2:2379 is unreachable (no answer in time: {details})")


def test_an_unknown_error_that_is_no_deadline_stays_a_refusal():
    with pytest.raises(EtcdComputeError) as caught, etcd_errors(ENDPOINTS):
        raise RpcError(grpc.StatusCode.UNKNOWN, "etcdserver: something else")
    assert caught.value.exit_code == 1


@pytest.mark.parametrize("details", [
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:10.0.0.1:2379: "
    "Ssl handshake failed: SSL_ERROR_SSL: CERTIFICATE_VERIFY_FAILED",
    # etcd refusing our certificate: seen only after our side of the handshake.
    "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:10.0.0.1:2379: "
    "Unwrap failed (TSI_DATA_CORRUPTED)"])
def test_a_failed_tls_handshake_is_named_as_such(details):
    with pytest.raises(ServiceUnavailable) as caught, etcd_errors(ENDPOINTS):
        raise RpcError(grpc.StatusCode.UNAVAILABLE, details)
    assert str(caught.value).startswith("etcd at 10.0.0.1:2379, 10.0.0.2:2379: TLS handshake "
                                        "failed (")
    assert "check etcd.ca_cert/cert/key" in str(caught.value)


@pytest.mark.parametrize("exc", [pyetcd.exceptions.ConnectionFailedError(),
                                 pyetcd.exceptions.ConnectionTimeoutError(),
                                 pyetcd.exceptions.NoServerAvailableError(),
                                 pyetcd.exceptions.InternalServerError()])
def test_pyetcd_connection_errors_are_service_unavailable(exc):
    with pytest.raises(ServiceUnavailable) as caught, etcd_errors(ENDPOINTS):
        raise exc
    assert exc.__class__.__name__ in str(caught.value)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_every_etcd_failure_is_counted_for_the_metrics_and_is_etcd_unavailable():
    from etcd_compute import metrics

    before = metrics.BACKEND_ERRORS.value("etcd")
    with pytest.raises(EtcdUnavailable), etcd_errors(ENDPOINTS):
        raise pyetcd.exceptions.ConnectionFailedError()
    with pytest.raises(EtcdComputeError), etcd_errors(ENDPOINTS):
        raise RpcError(grpc.StatusCode.PERMISSION_DENIED, "no")
    with pytest.raises(KeyError), etcd_errors(ENDPOINTS):
        raise KeyError("not etcd's")
    assert metrics.BACKEND_ERRORS.value("etcd") == before + 2


def test_an_rpc_error_without_a_code_counts_as_unreachable():
    with pytest.raises(ServiceUnavailable, match=r"unreachable \(RpcError\)"), \
            etcd_errors(ENDPOINTS):
        raise grpc.RpcError()


@pytest.mark.parametrize("code", [grpc.StatusCode.PERMISSION_DENIED,
                                  grpc.StatusCode.INVALID_ARGUMENT,
                                  grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_a_refusal_is_not_reported_as_an_outage(code):
    with pytest.raises(EtcdComputeError) as caught, etcd_errors(ENDPOINTS):
        raise RpcError(code, "etcdserver: too many operations in txn request")
    expected = PermissionDenied if code == grpc.StatusCode.PERMISSION_DENIED else EtcdComputeError
    assert type(caught.value) is expected
    assert caught.value.exit_code == 1
    assert str(caught.value) == (f"etcd refused the request: {code.name}: "
                                 "etcdserver: too many operations in txn request")


def test_other_exceptions_pass_through_untouched():
    with pytest.raises(ValueError, match="ours"), etcd_errors(ENDPOINTS):
        raise ValueError("ours")
    with etcd_errors(ENDPOINTS):
        pass
