"""Several etcd members: the client moves off a member it cannot reach, and a Store retries
on the next member only what cannot be applied twice (tests/cluster does it for real)."""

from __future__ import annotations

from types import SimpleNamespace

import grpc
import pyetcd
import pyetcd.exceptions
import pytest

from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Put, Store, Txn, never_sent, unreachable
from etcd_compute.etcd_failover import FailoverClient
from etcd_compute.keys import Keys
from tests.unit.fakes import RpcError

ENDPOINTS = ["10.0.0.1:2379", "10.0.0.2:2379", "10.0.0.3:2379"]
REFUSED = "failed to connect to all addresses; last error: Connection refused"


def pyetcd_error(code: grpc.StatusCode, details: str = "") -> Exception:
    """What pyetcd raises: its own exception, raised while handling gRPC's."""
    kind = {grpc.StatusCode.UNAVAILABLE: pyetcd.exceptions.ConnectionFailedError,
            grpc.StatusCode.DEADLINE_EXCEEDED: pyetcd.exceptions.ConnectionTimeoutError}[code]
    try:
        raise RpcError(code, details)
    except RpcError:
        try:
            raise kind()
        except kind as exc:
            return exc


def client() -> FailoverClient:
    # Channels connect lazily: nothing is sent anywhere here.
    return FailoverClient(endpoints=[pyetcd.Endpoint(e.split(":")[0], 2379, secure=False,
                                                     time_retry=0) for e in ENDPOINTS],
                          timeout=1, failover=True)


def test_an_unreachable_member_moves_the_client_to_the_next_round_robin():
    etcd = client()
    seen = [etcd._current_endpoint_label]
    for _ in range(3):
        with pytest.raises(pyetcd.exceptions.ConnectionFailedError):
            etcd._manage_grpc_errors(RpcError(grpc.StatusCode.UNAVAILABLE))
        seen.append(etcd._current_endpoint_label)
    assert sorted(seen[:3]) == sorted(ENDPOINTS) and seen[3] == seen[0]
    etcd.close()


def test_a_member_without_quorum_moves_the_client_on():
    etcd = client()
    before = etcd._current_endpoint_label
    timed_out = RpcError(grpc.StatusCode.UNKNOWN, "context deadline exceeded")
    with pytest.raises(grpc.RpcError):
        try:  # pyetcd re-raises the gRPC error it is handling
            raise timed_out
        except RpcError:
            etcd._manage_grpc_errors(timed_out)
    assert etcd._current_endpoint_label != before
    etcd.close()


def test_a_refusal_keeps_the_member():
    etcd = client()
    before = etcd._current_endpoint_label
    denied = RpcError(grpc.StatusCode.PERMISSION_DENIED)
    with pytest.raises(grpc.RpcError):
        try:  # pyetcd re-raises the gRPC error it is handling
            raise denied
        except RpcError:
            etcd._manage_grpc_errors(denied)
    assert etcd._current_endpoint_label == before
    etcd.close()


def test_what_counts_as_unreachable_and_as_never_sent():
    refused = pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED)
    timed_out = pyetcd_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
    no_leader = pyetcd_error(grpc.StatusCode.UNAVAILABLE, "etcdserver: leader changed")
    assert unreachable(refused) and never_sent(refused)
    assert unreachable(timed_out) and not never_sent(timed_out)
    assert unreachable(no_leader) and not never_sent(no_leader)
    no_quorum = RpcError(grpc.StatusCode.UNKNOWN, "context deadline exceeded")  # as raised
    assert unreachable(no_quorum) and not never_sent(no_quorum)
    denied = RpcError(grpc.StatusCode.PERMISSION_DENIED, REFUSED)
    assert not unreachable(denied) and not never_sent(denied)
    other = RpcError(grpc.StatusCode.UNKNOWN, "etcdserver: something else")
    assert not unreachable(other)
    assert not unreachable(ValueError("ours"))


class Members:
    """A client over members that fail in turn: `faults[i]` is what the i-th call raises
    (None: it answers)."""

    def __init__(self, *faults: Exception | None):
        self.faults, self.calls = list(faults), 0

    def get(self, key: str):
        return self._answer((b"v", SimpleNamespace(mod_revision=2, create_revision=1,
                                                   lease_id=0)))

    def transaction(self, compare, success, failure):
        return self._answer((True, []))

    def _answer(self, value):
        fault = self.faults[self.calls] if self.calls < len(self.faults) else None
        self.calls += 1
        if fault is not None:
            raise fault
        return value


def store_over(members: Members, timeout: float = 5.0) -> Store:
    store = Store.__new__(Store)  # no connection: the members are the fake
    store.endpoints, store.keys, store.client = list(ENDPOINTS), Keys(""), members
    store.config = {"endpoints": list(ENDPOINTS), "timeout": timeout}
    return store


def test_a_read_goes_on_to_the_next_member_when_one_is_dead_or_slow():
    members = Members(pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED),
                      pyetcd_error(grpc.StatusCode.UNAVAILABLE, "leader changed"))
    assert store_over(members).get("/k").value == b"v"
    assert members.calls == 3


def test_a_read_fails_once_every_member_was_asked():
    members = Members(*[pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED)] * 5)
    with pytest.raises(ServiceUnavailable, match="is unreachable"):
        store_over(members).get("/k")
    assert members.calls == len(ENDPOINTS)


def test_no_retry_once_the_timeout_ran_out():
    # A member that timed out used the whole timeout: a quorum loss fails in one.
    members = Members(pyetcd_error(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"))
    with pytest.raises(ServiceUnavailable):
        store_over(members, timeout=0.0).get("/k")
    assert members.calls == 1


def test_no_retry_after_a_member_let_most_of_the_timeout_pass(monkeypatch):
    # The surviving member of a lost quorum answers only as the call's deadline passes,
    # just inside the Store's: another try would wait a whole timeout again (a command
    # took two timeouts in tests/cluster).
    clock = [100.0]
    monkeypatch.setattr("etcd_compute.etcd.time.monotonic", lambda: clock[0])

    class SlowThenRefused(Members):
        def _answer(self, value):
            clock[0] += 1.99 if self.calls == 0 else 0.01
            return super()._answer(value)

    no_quorum = RpcError(grpc.StatusCode.UNKNOWN, "context deadline exceeded")
    members = SlowThenRefused(no_quorum, pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED),
                              no_quorum)
    with pytest.raises(ServiceUnavailable):
        store_over(members, timeout=2.0).get("/k")
    assert members.calls == 1
    # A refused connection is fast: the next member is asked, as before.
    clock[0] = 100.0
    fast = Members(pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED))
    assert store_over(fast, timeout=2.0).get("/k").value == b"v" and fast.calls == 2


def test_the_tries_together_stop_at_half_the_timeout(monkeypatch):
    # On a loaded machine two dead members each took just under half the timeout to
    # refuse; the third (no quorum) then waited a whole timeout: `show` took 4.7 s with a
    # 2 s timeout in tests/cluster. Once the tries so far used half the timeout, no more.
    clock = [100.0]
    monkeypatch.setattr("etcd_compute.etcd.time.monotonic", lambda: clock[0])

    class SlowRefusals(Members):
        def _answer(self, value):
            clock[0] += 0.9
            return super()._answer(value)

    refused = pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED)
    members = SlowRefusals(refused, refused, refused)
    with pytest.raises(ServiceUnavailable):
        store_over(members, timeout=2.0).get("/k")
    assert members.calls == 2


def test_a_write_is_sent_again_only_if_it_never_left():
    txn = Txn([], [Put("/k", "v")])
    refused = Members(pyetcd_error(grpc.StatusCode.UNAVAILABLE, REFUSED))
    assert store_over(refused).commit(txn) == 0 and refused.calls == 2
    # "leader changed": the write may have been applied; sending it again could apply it
    # twice, so the caller hears of it instead.
    maybe_applied = Members(pyetcd_error(grpc.StatusCode.UNAVAILABLE, "leader changed"))
    with pytest.raises(ServiceUnavailable):
        store_over(maybe_applied).commit(txn)
    assert maybe_applied.calls == 1


def test_a_refusal_is_not_retried():
    members = Members(RpcError(grpc.StatusCode.PERMISSION_DENIED, "denied"))
    with pytest.raises(EtcdComputeError, match="PERMISSION_DENIED"):
        store_over(members).get("/k")
    assert members.calls == 1
