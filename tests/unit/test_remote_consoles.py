"""Console tokens (remote_consoles.py): only a hash in etcd, with a lease; used once, in
one transaction; refused when malformed, unknown, expired, used or unreadable; the URL as
Nova makes it for noVNC; the relay's few words."""

from __future__ import annotations

import hashlib
from urllib import parse

import pytest

from etcd_compute import remote_consoles
from etcd_compute.etcd import Put, Txn
from etcd_compute.remote_consoles import TokenRefused, consume, issue
from tests.unit.fakes import FakeStore

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


def test_a_token_is_kept_as_its_hash_with_a_lease_and_names_the_server_only():
    store = FakeStore()
    token = issue(store, UUID, 600, "demo-user (project p1)", now=1000.0)
    assert remote_consoles.TOKEN.match(token)
    (entry,), _ = store.get_prefix(store.keys.console_tokens())
    assert entry.key.endswith("/" + hashlib.sha256(token.encode()).hexdigest())
    assert token.encode() not in entry.value and store.leases[entry.lease] == 600
    granted = consume(store, token, now=1001.0)
    assert (granted.instance_uuid, granted.console_type) == (UUID, "novnc")


def test_a_token_opens_once():
    store = FakeStore()
    token = issue(store, UUID, 600, "someone")
    consume(store, token)
    with pytest.raises(TokenRefused, match="already used"):
        consume(store, token)


def test_a_use_racing_another_loses_in_the_transaction():
    store = FakeStore()
    token = issue(store, UUID, 600, "someone")
    key = store.keys.console_token(remote_consoles.digest(token))
    real_get = store.get

    def get_then_race(wanted: str):
        entry = real_get(wanted)
        store.commit(Txn([], [Put(key, entry.value.decode())]))  # the other use's write
        return entry

    store.get = get_then_race  # type: ignore[method-assign]
    with pytest.raises(TokenRefused, match="already used"):
        consume(store, token)


def test_an_expired_token_is_refused_even_before_its_lease_ends():
    store = FakeStore()
    token = issue(store, UUID, 10, "someone", now=1000.0)
    with pytest.raises(TokenRefused, match="expired"):
        consume(store, token, now=1010.0)
    with pytest.raises(TokenRefused):  # and it is used up all the same
        consume(store, token, now=1000.0)


def test_an_expired_lease_leaves_nothing_to_use():
    store = FakeStore()
    token = issue(store, UUID, 10, "someone")
    (entry,), _ = store.get_prefix(store.keys.console_tokens())
    store.expire(entry.lease)
    with pytest.raises(TokenRefused, match="invalid, expired or already used"):
        consume(store, token)


@pytest.mark.parametrize("token", ["", "garbage", "A" * 42, "A" * 44, "A" * 42 + "=",
                                   "../" + "A" * 40, "A" * 42 + "\n", None, 42])
def test_malformed_tokens_are_refused_without_a_read(token):
    store = FakeStore()
    store.get = lambda key: pytest.fail("read for a malformed token")  # type: ignore
    with pytest.raises(TokenRefused, match="malformed"):
        consume(store, token)  # type: ignore[arg-type]


def test_a_well_formed_token_nobody_issued_is_refused():
    with pytest.raises(TokenRefused, match="invalid, expired or already used"):
        consume(FakeStore(), "A" * 43)


def test_an_unreadable_token_record_opens_nothing():
    store = FakeStore()
    token = "B" * 43
    store.put_raw(store.keys.console_token(remote_consoles.digest(token)),
                  '{"instance_uuid": "10.0.0.1:5900"}')
    with pytest.raises(TokenRefused, match="unreadable"):
        consume(store, token)


def test_only_a_uuid_is_issued_for():
    with pytest.raises(ValueError):
        issue(FakeStore(), "10.0.0.1:5900", 600, "someone")


@pytest.mark.parametrize(("base", "expected"), [
    ("http://127.0.0.1:6080/vnc_lite.html",
     "http://127.0.0.1:6080/vnc_lite.html?path=%3Ftoken%3DTOKEN"),
    ("https://c.example/vnc_lite.html?path=websockify",
     "https://c.example/vnc_lite.html?path=websockify%3Ftoken%3DTOKEN"),
    ("https://c.example/vnc.html?autoconnect=true",
     "https://c.example/vnc.html?autoconnect=true&path=%3Ftoken%3DTOKEN"),
])
def test_the_url_carries_the_token_in_novncs_path(base, expected):
    url = remote_consoles.access_url(base, "TOKEN")
    assert url == expected
    assert parse.parse_qs(parse.urlsplit(url).query)["path"][0].endswith("?token=TOKEN")


def test_the_relays_words():
    assert remote_consoles.parse_request(remote_consoles.request_line(UUID)) == UUID
    for line in (b"CONSOLE 10.0.0.1:5900\n", b"CONSOLE " + UUID.encode() + b"\n\n",
                 b"CONSOLE " + UUID.upper().encode() + b"\n", b"\xff\n", b""):
        with pytest.raises(ValueError):
            remote_consoles.parse_request(line)
    assert remote_consoles.parse_answer(remote_consoles.answer_ok()) is None
    assert remote_consoles.parse_answer(remote_consoles.answer_no("gone\nnow")) == "gone?now"
    assert len(remote_consoles.answer_no("x" * 1000)) <= remote_consoles.ANSWER_MAX_BYTES
    assert remote_consoles.parse_answer(b"HTTP/1.1 200\n").startswith("unexpected answer")
