"""The etcd store: our transaction types in pyetcd's terms, compare helpers, the Store over a
client, and the message reads and writes every store shares (through the in-memory store).
Connecting and one-line errors: test_etcd_connection.py."""

from __future__ import annotations

import json
import uuid as uuidlib
from types import SimpleNamespace

import grpc
import pyetcd.etcdrpc
import pyetcd.exceptions
import pyetcd.transactions
import pytest

from etcd_compute import messages
from etcd_compute.errors import (
    InvalidMessage,
    ServiceUnavailable,
)
from etcd_compute.etcd import (
    Compare,
    Delete,
    Put,
    Store,
    Txn,
    _to_pyetcd_compare,
    _to_pyetcd_op,
    absent,
    none_created_since,
    prefix_end,
    put_message,
    unchanged,
)
from etcd_compute.keys import Keys
from tests.unit.fakes import FakeStore, RpcError

ENDPOINTS = ["10.0.0.1:2379", "10.0.0.2:2379"]
RP = str(uuidlib.uuid4())


# ------------------------------------------------------------------ translation to pyetcd


@pytest.mark.parametrize(
    ("target", "cls", "field"),
    [("mod", pyetcd.transactions.Mod, "mod_revision"),
     ("create", pyetcd.transactions.Create, "create_revision"),
     ("version", pyetcd.transactions.Version, "version")],
)
@pytest.mark.parametrize(
    ("op", "result"),
    [("==", pyetcd.etcdrpc.Compare.EQUAL), ("!=", pyetcd.etcdrpc.Compare.NOT_EQUAL),
     ("<", pyetcd.etcdrpc.Compare.LESS), (">", pyetcd.etcdrpc.Compare.GREATER)],
)
def test_compare_becomes_the_pyetcd_compare_of_the_same_target_op_and_value(
        target, cls, field, op, result):
    converted = _to_pyetcd_compare(Compare("/k", target, op, 42))
    assert type(converted) is cls
    assert (converted.key, converted.range_end, converted.op, converted.value) == (
        "/k", None, result, 42)
    message = converted.build_message()  # what goes on the wire
    assert (message.key, message.result, getattr(message, field)) == (b"/k", result, 42)
    assert message.range_end == b""


def test_a_range_compare_keeps_its_range_end():
    converted = _to_pyetcd_compare(Compare("/hosts/", "create", "<", 8, "/hosts0"))
    assert type(converted) is pyetcd.transactions.Create
    assert (converted.key, converted.range_end) == ("/hosts/", "/hosts0")
    assert converted.build_message().range_end == b"/hosts0"


def test_an_unknown_compare_op_or_target_is_refused():
    with pytest.raises(KeyError):
        _to_pyetcd_compare(Compare("/k", "mod", ">=", 1))
    with pytest.raises(KeyError):
        _to_pyetcd_compare(Compare("/k", "value", "==", 1))


def test_put_becomes_a_pyetcd_put_with_its_lease():
    converted = _to_pyetcd_op(Put("/k", "v", lease=1234))
    assert type(converted) is pyetcd.transactions.Put
    assert (converted.key, converted.value, converted.lease) == ("/k", "v", 1234)
    assert _to_pyetcd_op(Put("/k", "v")).lease is None


def test_delete_becomes_a_pyetcd_delete_of_one_key():
    converted = _to_pyetcd_op(Delete("/k"))
    assert type(converted) is pyetcd.transactions.Delete
    assert (converted.key, converted.range_end) == ("/k", None)


# ------------------------------------------------------------------ compare helpers


def test_absent_means_version_zero():
    assert absent("/k") == Compare("/k", "version", "==", 0)


def test_unchanged_compares_the_mod_revision_or_absence():
    assert unchanged("/k", 17) == Compare("/k", "mod", "==", 17)
    assert unchanged("/k", 0) == absent("/k")


@pytest.mark.parametrize(("prefix", "end"), [("/hosts/", "/hosts0"), ("/a/b", "/a/c"),
                                             ("/p/x/", "/p/x0")])
def test_prefix_end_is_the_first_key_after_the_prefix(prefix, end):
    assert prefix_end(prefix) == end
    inside = [prefix, prefix + "zzz", prefix + "\x7f"]
    assert all(prefix <= key < end for key in inside)
    assert not end.startswith(prefix) and end > prefix


def test_none_created_since_covers_the_whole_prefix():
    assert none_created_since("/hosts/", 10) == Compare("/hosts/", "create", "<", 11, "/hosts0")


def test_none_created_since_holds_until_a_key_is_created_after_the_revision():
    store = FakeStore()
    store.put_raw("/g/a", "1")
    revision = store.revision
    assert store.commit(Txn([none_created_since("/g/", revision)], [])) is not None
    store.put_raw("/g/b", "2")
    assert store.commit(Txn([none_created_since("/g/", revision)], [])) is None
    # An empty range passes.
    assert store.commit(Txn([none_created_since("/empty/", 0)], [])) is not None


def test_txns_add_up_compares_and_writes_in_order():
    a = Txn([absent("/a")], [Put("/a", "1")])
    b = Txn([absent("/b")], [Delete("/c")])
    total = a + b
    assert total.compare == [absent("/a"), absent("/b")]
    assert total.success == [Put("/a", "1"), Delete("/c")]
    assert a.compare == [absent("/a")]  # the parts are left as they were


def test_put_message_validates_before_anything_is_written():
    message = {"host": RP, "name": "h", "since": 1.0}
    put = put_message(messages.ALIVE, "/alive/x", message, lease=7)
    assert json.loads(put.value) == message and put.lease == 7
    with pytest.raises(InvalidMessage):
        put_message(messages.ALIVE, "/alive/x", {"host": "not-a-uuid", "name": "h", "since": 1})


# ------------------------------------------------------------------ Store over a fake client


class FakeClient:
    """pyetcd's client as far as Store uses it."""

    def __init__(self, succeeded=True, responses=(), error=None):
        self.succeeded, self.responses, self.error = succeeded, list(responses), error
        self.transactions: list[dict] = []

    def transaction(self, compare, success, failure):
        if self.error is not None:
            raise self.error
        self.transactions.append({"compare": compare, "success": success, "failure": failure})
        return self.succeeded, self.responses

    def get(self, key):
        if self.error is not None:
            raise self.error
        return b"v", SimpleNamespace(mod_revision=5, create_revision=3, lease_id=9)


def store_over(client: FakeClient) -> Store:
    store = Store.__new__(Store)  # no connection: the client is the fake
    store.endpoints, store.keys, store.client = list(ENDPOINTS), Keys(""), client
    store.config = {"endpoints": list(ENDPOINTS)}
    return store


def put_response(revision: int):
    response = pyetcd.etcdrpc.ResponseOp()
    response.response_put.header.revision = revision
    return response


def test_store_commit_sends_translated_ops_and_returns_the_revision():
    client = FakeClient(True, [put_response(41)])
    revision = store_over(client).commit(Txn([unchanged("/k", 3)],
                                             [Put("/k", "v", 5), Delete("/j")]))
    assert revision == 41
    (sent,) = client.transactions
    (compare,) = sent["compare"]
    assert type(compare) is pyetcd.transactions.Mod and compare.value == 3
    assert [type(op) for op in sent["success"]] == [pyetcd.transactions.Put,
                                                    pyetcd.transactions.Delete]
    assert sent["success"][0].lease == 5 and sent["failure"] == []


def test_store_commit_is_none_when_a_compare_failed():
    assert store_over(FakeClient(False)).commit(Txn([absent("/k")], [Put("/k", "v")])) is None


def test_store_errors_are_one_line_service_errors():
    store = store_over(FakeClient(error=RpcError(grpc.StatusCode.UNAVAILABLE)))
    with pytest.raises(ServiceUnavailable, match="etcd at 10.0.0.1:2379"):
        store.commit(Txn([], [Put("/k", "v")]))
    with pytest.raises(ServiceUnavailable):
        store.get("/k")


def test_store_get_keeps_revisions_and_lease():
    entry = store_over(FakeClient()).get("/k")
    assert (entry.key, entry.value, entry.mod_revision, entry.create_revision, entry.lease) == (
        "/k", b"v", 5, 3, 9)


# ------------------------------------------------------------------ KeyValueStore


ALIVE = {"host": RP, "name": "h", "since": 1.0}


def test_put_with_a_lease_object_writes_its_id():
    store = FakeStore()
    lease_id = store.grant(10)
    store.put(messages.ALIVE, "/alive/x", ALIVE, lease=SimpleNamespace(id=lease_id))
    assert store.get("/alive/x").lease == lease_id
    assert store.committed[-1].success[0].lease == lease_id


def test_put_with_a_lease_id_or_none():
    store = FakeStore()
    lease_id = store.grant(10)
    store.put(messages.ALIVE, "/alive/a", ALIVE, lease=lease_id)
    store.put(messages.ALIVE, "/alive/b", ALIVE)
    assert store.get("/alive/a").lease == lease_id
    assert store.get("/alive/b").lease == 0
    assert store.committed[-1].success[0].lease is None


def test_put_refuses_an_invalid_message_and_writes_nothing():
    store = FakeStore()
    with pytest.raises(InvalidMessage):
        store.put(messages.ALIVE, "/alive/x", {**ALIVE, "since": -1})
    assert store.get("/alive/x") is None and store.committed == []


def test_read_returns_the_message_and_its_revision():
    store = FakeStore()
    store.put(messages.ALIVE, "/alive/x", ALIVE)
    assert store.read(messages.ALIVE, "/alive/x") == (ALIVE, store.revision)
    assert store.read(messages.ALIVE, "/alive/missing") == (None, 0)


def test_read_of_an_invalid_message_raises():
    store = FakeStore()
    store.put_raw("/alive/x", "{not json")
    with pytest.raises(InvalidMessage):
        store.read(messages.ALIVE, "/alive/x")


def test_read_prefix_skips_invalid_messages_and_keys_by_last_segment():
    store = FakeStore()
    store.put(messages.ALIVE, "/alive/good", ALIVE)
    store.put_raw("/alive/garbage", "{not json")
    store.put_raw("/alive/wrong", json.dumps({"host": "x"}))
    store.put(messages.ALIVE, "/other/good", ALIVE)
    assert store.read_prefix(messages.ALIVE, "/alive/") == {"good": ALIVE}
    assert store.read_prefix(messages.ALIVE, "/nothing/") == {}


def test_delete_removes_the_key():
    store = FakeStore()
    store.put(messages.ALIVE, "/alive/x", ALIVE)
    store.delete("/alive/x")
    assert store.get("/alive/x") is None
    assert store.committed[-1].success == [Delete("/alive/x")]


def test_txn_size_grows_with_keys_and_values():
    small = Txn([absent("/k")], [Put("/k", "v")])
    large = Txn([absent("/k")], [Put("/k", "v" * 100_000), Delete("/other")])
    assert small.size() < 100 < 100_000 < large.size() < 100_200
