"""virt/remote_fence.py: which guests a fence destroys (libvirt's test driver, in-process),
and the child process's verdicts: fenced, unreachable within the timeout, failed. Over TLS
against a real libvirtd, a cut cable and a foreign CA: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import json
import sys
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from etcd_compute.children import module_command
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


def test_the_child_process_answers_with_a_verdict():
    verdict = remote_fence.fence("qemu+unix:///system?socket=/nonexistent/sock",
                                 [str(uuidlib.uuid4())], timeout=30)
    assert verdict.outcome == "unreachable" and not verdict.fenced
    assert "nonexistent" in verdict.reason and verdict.seconds > 0
    fenced = remote_fence.fence(TEST_URI, [str(uuidlib.uuid4())], timeout=30)
    assert fenced.fenced and fenced.destroyed == []


def test_a_fence_that_hangs_is_killed_at_its_timeout(monkeypatch, tmp_path):
    monkeypatch.setattr(remote_fence, "command", lambda uri, uuids: [
        sys.executable, "-c", "import time; time.sleep(60)"])
    verdict = remote_fence.fence(TEST_URI, [], timeout=0.5)
    assert verdict.outcome == "unreachable" and "within 0.5s" in verdict.reason
    assert verdict.seconds < 10


def test_a_helper_that_answers_nonsense_failed(monkeypatch):
    monkeypatch.setattr(remote_fence, "command", lambda uri, uuids: [
        sys.executable, "-c", "import sys; print('garbage'); sys.exit(1)"])
    verdict = remote_fence.fence(TEST_URI, [], timeout=30)
    assert verdict.outcome == "failed" and verdict.reason.startswith("fence helper:")
    monkeypatch.setattr(remote_fence, "command", lambda uri, uuids: [
        sys.executable, "-c",
        "import json; print(json.dumps({'outcome': 'maybe', 'destroyed': [], 'reason': ''}))"])
    assert remote_fence.fence(TEST_URI, [], timeout=30).outcome == "failed"


def test_the_helper_refuses_what_is_not_an_instance_uuid(capsys):
    assert remote_fence.main(["--uri", TEST_URI, "../../etc"]) == 2
    answer = json.loads(capsys.readouterr().out)
    assert answer["outcome"] == "failed" and "not an instance uuid" in answer["reason"]


def test_the_helper_reaches_a_host_by_its_address_with_our_certificates(capsys, monkeypatch):
    asked = []
    monkeypatch.setattr(remote_fence, "fence_here", lambda uri, uuids: asked.append(uri) or
                        {"outcome": "fenced", "destroyed": [], "reason": ""})
    assert remote_fence.main(["--address", "10.0.0.2", "--pki-dir", "/etc/l", str(
        uuidlib.uuid4())]) == 0
    assert asked == ["qemu+tls://10.0.0.2/system?pkipath=/etc/l"]
    assert remote_fence.main(["--address", "10.0.0.2/x", "--pki-dir", "/etc/l"]) == 2
    assert "not an address" in json.loads(capsys.readouterr().out.splitlines()[-1])["reason"]
    with pytest.raises(SystemExit):
        remote_fence.main(["--address", "10.0.0.2"])


def test_the_helper_is_this_module_run_by_this_python():
    argv = remote_fence.command("qemu+tls://10.0.0.2/system", ["u1"])
    assert argv == module_command("etcd_compute.virt.remote_fence", "--uri",
                                  "qemu+tls://10.0.0.2/system", "u1")
    assert argv[0] == sys.executable
    assert Path(remote_fence.__file__).stem == remote_fence.MODULE.rsplit(".", 1)[1]


def test_the_child_answers_from_a_directory_that_does_not_hold_the_package(tmp_path,
                                                                           monkeypatch):
    monkeypatch.chdir(tmp_path)
    verdict = remote_fence.fence(TEST_URI, [str(uuidlib.uuid4())], timeout=30)
    assert verdict.fenced and verdict.destroyed == [], verdict
