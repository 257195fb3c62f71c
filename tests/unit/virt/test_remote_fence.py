"""virt/remote_fence.py: which guests a fence destroys (libvirt's test driver, in-process),
and the helper's answers: what it refuses, and that it checks the libvirtd's certificate
names the host before it fences anything. Run as a child, it is the controller's
(`controller/fencing.through_libvirt`: tests/unit/controller/test_fencing.py); over TLS
against a real libvirtd, a cut cable, a foreign CA and another host's libvirtd:
tests/virt/test_migration_vm.py."""

from __future__ import annotations

import json
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from etcd_compute.virt import domain, remote_fence
from tests import support

TEST_URI = "test:///default"


@pytest.fixture(autouse=True)
def no_error_left() -> Iterator[None]:
    """fence_here runs in this process here (a child in use): the error libvirt keeps per
    thread after a failed open would become the message of the next libvirtError another
    test's fake raises in this worker."""
    yield
    libvirt.virResetLastError()


@pytest.fixture
def guests() -> Iterator[dict[str, str]]:
    """Two running guests of ours and one that is not ours, on the test driver."""
    connection = libvirt.open(TEST_URI)
    made: dict[str, str] = {}
    try:
        for role in ("ours-1", "ours-2", "foreign"):
            uuid = str(uuidlib.uuid4())
            xml = domain.domain_xml(support.domain_spec(uuid, domain_type="test",
                                                        network=None))
            if role == "foreign":
                xml = xml.replace(domain.NAMESPACE, "https://someone-else.invalid/ns")
            connection.defineXML(xml).create()
            made[role] = uuid
        yield made
    finally:
        for uuid in made.values():
            try:
                found = connection.lookupByName(uuid)
                if found.isActive():
                    found.destroy()
                found.undefine()
            except libvirt.libvirtError:
                pass
        connection.close()


def active(uuid: str) -> bool:
    connection = libvirt.open(TEST_URI)
    try:
        return bool(connection.lookupByName(uuid).isActive())
    finally:
        connection.close()


def test_only_the_named_guests_of_ours_are_destroyed_and_then_confirmed_gone(guests):
    missing = str(uuidlib.uuid4())
    answer = remote_fence.fence_here(TEST_URI, [guests["ours-1"], guests["foreign"], missing])
    assert answer == {"outcome": "fenced", "destroyed": [guests["ours-1"]], "reason": ""}
    assert not active(guests["ours-1"])
    assert active(guests["ours-2"]) and active(guests["foreign"])


def test_a_guest_stopped_already_counts_as_fenced(guests):
    remote_fence.fence_here(TEST_URI, [guests["ours-2"]])
    assert remote_fence.fence_here(TEST_URI, [guests["ours-2"]]) == \
        {"outcome": "fenced", "destroyed": [], "reason": ""}


def test_a_libvirtd_that_does_not_answer_is_unreachable():
    answer = remote_fence.fence_here("qemu+unix:///system?socket=/nonexistent/sock",
                                     [str(uuidlib.uuid4())])
    assert answer["outcome"] == "unreachable" and "nonexistent" in answer["reason"]


PKI = ["--address", "10.0.0.2", "--pki-dir", "/etc/l", "--name", "hv2"]


def test_the_helper_refuses_what_is_not_an_instance_uuid(capsys):
    assert remote_fence.main([*PKI, "../../etc"]) == 2
    answer = json.loads(capsys.readouterr().out)
    assert answer["outcome"] == "failed" and "not an instance uuid" in answer["reason"]


def test_the_helper_fences_only_a_libvirtd_whose_certificate_names_the_host(capsys,
                                                                             monkeypatch):
    from etcd_compute.virt import migration

    checked, fenced = [], []
    monkeypatch.setattr(migration, "verify_peer", lambda address, pki_dir, name, timeout:
                        checked.append((address, pki_dir, name)))
    monkeypatch.setattr(remote_fence, "fence_here", lambda uri, uuids: fenced.append(uri) or
                        {"outcome": "fenced", "destroyed": [], "reason": ""})
    assert remote_fence.main([*PKI, str(uuidlib.uuid4())]) == 0
    assert checked == [("10.0.0.2", "/etc/l", "hv2")]
    assert fenced == ["qemu+tls://10.0.0.2/system?pkipath=/etc/l"]

    def another_host_s(address, pki_dir, name, timeout):
        raise ValueError(f"the libvirtd at {address} presents a certificate for hv3, not "
                         f"for {name}")

    monkeypatch.setattr(migration, "verify_peer", another_host_s)
    assert remote_fence.main([*PKI, str(uuidlib.uuid4())]) == 2
    answer = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert answer["outcome"] == "failed" and "for hv3, not for hv2" in answer["reason"]
    assert len(fenced) == 1  # nothing touched there

    def silent(address, pki_dir, name, timeout):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(migration, "verify_peer", silent)
    assert remote_fence.main([*PKI, str(uuidlib.uuid4())]) == 1
    assert json.loads(capsys.readouterr().out.splitlines()[-1]) == {
        "outcome": "unreachable", "destroyed": [], "reason": "10.0.0.2: Connection refused"}
    assert remote_fence.main(["--address", "10.0.0.2/x", "--pki-dir", "/etc/l",
                              "--name", "hv2"]) == 2
    assert "not an address" in json.loads(capsys.readouterr().out.splitlines()[-1])["reason"]
    with pytest.raises(SystemExit):  # no name: nothing to check the certificate against
        remote_fence.main(["--address", "10.0.0.2", "--pki-dir", "/etc/l"])


def test_the_helper_is_this_module():
    assert Path(remote_fence.__file__).stem == remote_fence.MODULE.rsplit(".", 1)[1]
