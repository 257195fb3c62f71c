"""A guest's password from its metadata server to the compute API and back, through a real
compute daemon (fake driver) and real etcd (TLS, the host's own RBAC role): the metadata
server's POST handling (`mdserver/password.py`, as the server runs it) is answered once the
compute published the password under its host's prefix; the compute API's object reads it
there; its clear (os-server-password DELETE) deletes the key, the compute forgets the
password too, and the guest may POST again, which the compute publishes anew."""

from __future__ import annotations

import time

import pytest

from etcd_compute import messages
from etcd_compute.api.objects.server_passwords import ServerPasswords
from etcd_compute.api.objects.servers import Server
from etcd_compute.mdserver.password import PasswordRefused, accept
from etcd_compute.virt.instance_files import InstanceFiles
from tests.compute.helpers import claim_and_send, wait_state
from tests.support import make_spec, wait_for


def test_a_posted_password_is_published_shown_cleared_and_posted_again(
        start_compute, compute_config, store, placement):
    rp = compute_config["compute"]["uuid"]
    start_compute(compute_config)
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    files = InstanceFiles.of(compute_config["compute"]["instances_dir"], spec["uuid"])
    files.create()  # (the fake driver keeps no directory; the libvirt one does)
    server = Server({"uuid": spec["uuid"], "project_id": "p"}, 1, host=rp)
    passwords = ServerPasswords(store)

    began = time.monotonic()
    assert accept(files, b"c2VjcmV0\nZW5jcnlwdGVk", wait=10) is True  # published, then 200
    published_in = time.monotonic() - began
    assert passwords.show(server) == "c2VjcmV0\nZW5jcnlwdGVk"  # right after the POST
    message, _ = store.read(messages.SERVER_PASSWORD, store.keys.password(rp, spec["uuid"]))
    assert message is not None and message["uuid"] == spec["uuid"]
    with pytest.raises(PasswordRefused) as refused:
        accept(files, b"another", wait=0)
    assert refused.value.status == "409 Conflict"

    passwords.clear(server)  # os-server-password DELETE
    assert passwords.show(server) == ""
    wait_for(lambda: files.read_password() is None, 10,
             what="the compute forgetting the cleared password")
    assert accept(files, b"new one", wait=10) is True
    assert passwords.show(server) == "new one"
    print(f"\npublished {published_in:.2f} s after the POST")
