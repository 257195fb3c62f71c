"""api/objects/server_passwords.py over FakeStore: the key its host published, read and
deleted; none, no host yet or a broken value reads as ""."""

from __future__ import annotations

import uuid as uuidlib

from etcd_compute import messages
from etcd_compute.api.objects.server_passwords import ServerPasswords
from etcd_compute.api.objects.servers import Server
from tests.unit.fakes import FakeStore

RP, UUID = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def test_show_and_clear():
    store = FakeStore()
    server = Server({"uuid": UUID, "project_id": "p"}, 1, host=RP)
    passwords = ServerPasswords(store)
    assert passwords.show(server) == ""
    store.put(messages.SERVER_PASSWORD, store.keys.password(RP, UUID),
              {"uuid": UUID, "password": "p", "updated_at": 1.0})
    assert passwords.show(server) == "p"
    assert passwords.show(Server(server.doc, 1, host=None)) == ""
    passwords.clear(Server(server.doc, 1, host=None))  # no host: nothing to delete
    assert passwords.show(server) == "p"
    passwords.clear(server)
    assert store.get(store.keys.password(RP, UUID)) is None and passwords.show(server) == ""


def test_a_value_that_breaks_its_schema_reads_as_none():
    store = FakeStore()
    store.put_raw(store.keys.password(RP, UUID), '{"password": "x" }')
    assert ServerPasswords(store).show(Server({"uuid": UUID}, 1, host=RP)) == ""
