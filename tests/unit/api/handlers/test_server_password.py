"""os-server-password: the password its host published for the server (what the guest
POSTed), "" without one; DELETE removes it (the host forgets it when it sees that); Nova's
404 and 403 first, whatever the lock."""

from __future__ import annotations

import time

from etcd_compute import messages
from etcd_compute.instances import records
from tests.unit.api.harness import Harness, active


def publish(harness: Harness, uuid: str, password: str) -> str:
    """As the host does (compute/passwords.py): the key under its own prefix."""
    host = records.locate(harness.store, uuid)["host"]
    key = harness.store.keys.password(host, uuid)
    harness.store.put(messages.SERVER_PASSWORD, key,
                      {"uuid": uuid, "password": password, "updated_at": time.time()})
    return key


def test_a_server_without_a_password_shows_empty_and_clearing_it_is_204(harness: Harness):
    uuid = active(harness)
    path = f"/v2.1/servers/{uuid}/os-server-password"
    assert harness.call("GET", path).json == {"password": ""}
    assert harness.call("DELETE", path).status_int == 204
    assert harness.call("GET", path, project="p2").status_int == 404
    assert harness.call("DELETE", path, roles=("reader",)).status_int == 403
    assert harness.call("GET", "/v2.1/servers/" + "0" * 32 + "/os-server-password"
                        ).status_int == 404


def test_the_published_password_is_shown_and_a_clear_deletes_its_key(harness: Harness):
    uuid = active(harness)
    key = publish(harness, uuid, "ZW5jcnlwdGVk\nYmFzZTY0")
    path = f"/v2.1/servers/{uuid}/os-server-password"
    assert harness.call("GET", path).json == {"password": "ZW5jcnlwdGVk\nYmFzZTY0"}
    assert harness.call("GET", path, roles=("reader",)).json["password"]
    assert harness.call("DELETE", path, project="p2").status_int == 404
    assert harness.store.get(key) is not None  # not another project's to clear
    assert harness.call("DELETE", path).status_int == 204
    assert harness.store.get(key) is None
    assert harness.call("GET", path).json == {"password": ""}


def test_a_stored_value_that_breaks_its_schema_is_never_shown(harness: Harness):
    uuid = active(harness)
    host = records.locate(harness.store, uuid)["host"]
    harness.store.put_raw(harness.store.keys.password(host, uuid),
                          '{"uuid": "x", "password": "leak", "extra": 1}')
    assert harness.call("GET", f"/v2.1/servers/{uuid}/os-server-password").json == {
        "password": ""}
