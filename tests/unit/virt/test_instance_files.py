"""An instance's directory: only uuids become paths, meta.json round trips, console tails."""

from __future__ import annotations

import json
import stat
import uuid as uuidlib

import pytest

from etcd_compute.virt.instance_files import InstanceFiles, hostname_for, instance_meta
from tests.support import make_spec

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


def test_an_instance_directory_is_named_by_its_uuid(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    assert files.directory == tmp_path / UUID
    assert (files.disk.name, files.config_drive.name, files.console_log.name,
            files.meta.name) == ("disk.qcow2", "config.iso", "console.log", "meta.json")
    assert all(p.parent == files.directory
               for p in (files.disk, files.config_drive, files.console_log, files.meta))


@pytest.mark.parametrize(
    "uuid",
    ["../x", "..", "", "/etc", f"../{UUID}", f"{UUID}/..", UUID + "\n", UUID.upper(),
     UUID.replace("-", ""), f"{UUID}/x", "instance-1", UUID + "\x00"],
)
def test_anything_but_a_uuid_is_refused_before_it_becomes_a_path(tmp_path, uuid):
    with pytest.raises(ValueError, match="not an instance uuid"):
        InstanceFiles.of(tmp_path, uuid)


def test_create_makes_a_traversable_directory_and_remove_takes_it_all(tmp_path):
    files = InstanceFiles.of(tmp_path / "instances", UUID)
    (tmp_path / "instances").mkdir(mode=0o777)
    files.create()
    files.create()  # twice is fine
    # qemu (another user) may traverse to its disks; no one else may list them.
    assert stat.S_IMODE(files.directory.stat().st_mode) == 0o711
    assert stat.S_IMODE((tmp_path / "instances").stat().st_mode) == 0o711
    files.disk.write_bytes(b"qcow")
    files.remove()
    assert not files.directory.exists() and (tmp_path / "instances").is_dir()
    files.remove()  # already gone


def test_meta_round_trips_and_is_replaced_whole(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    files.create()
    assert files.read_meta() is None
    meta = {"uuid": UUID, "name": "web", "hostname": "web", "user_data": "ü\n", "ssh_key": None}
    files.write_meta(meta)
    assert files.read_meta() == meta
    files.write_meta({**meta, "name": "db"})
    assert files.read_meta()["name"] == "db"
    assert stat.S_IMODE(files.meta.stat().st_mode) == 0o600  # tenant data
    assert [p.name for p in files.directory.iterdir()] == ["meta.json"]  # no partial left


def test_an_unreadable_meta_reads_as_none(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    files.create()
    files.meta.write_text("{half")
    assert files.read_meta() is None


def test_console_tail_is_the_last_bytes_of_the_log(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    assert files.console_tail(100) == ""  # no directory, no log
    files.create()
    assert files.console_tail(100) == ""
    files.console_log.write_bytes(b"first line\n" + b"x" * 50 + b"\nlast line\n")
    assert files.console_tail(10) == "last line\n"
    assert files.console_tail(10_000).startswith("first line\n")


def test_a_moved_guest_s_console_tail_starts_in_its_history(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    files.create()
    files.console_history.write_bytes(b"booted elsewhere\n")
    assert files.console_tail(100) == "booted elsewhere\n"
    files.console_log.write_bytes(b"running here\n")
    assert files.console_tail(100) == "booted elsewhere\nrunning here\n"
    assert files.console_tail(len("running here\n") + 4) == "ere\nrunning here\n"
    assert files.console_tail(5) == "here\n"


def test_console_tail_survives_bytes_that_are_not_utf8(tmp_path):
    files = InstanceFiles.of(tmp_path, UUID)
    files.create()
    files.console_log.write_bytes("é".encode() + b"\xff ok")  # the tail may cut a character
    assert files.console_tail(5) == "\ufffd\ufffd ok"
    assert files.console_tail(100) == "é\ufffd ok"


@pytest.mark.parametrize(
    ("name", "hostname"),
    [
        ("web-1", "web-1"),
        ("Web 1", "web-1"),
        ("my_db.example", "my-db-example"),
        ("--edge--", "edge"),
        ("ünïcode", "n-code"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + "-b", "a" * 62),  # cut at 63, no trailing hyphen
    ],
)
def test_hostname_is_a_valid_label_from_the_name(name, hostname):
    assert hostname_for(name, UUID) == hostname


@pytest.mark.parametrize("name", [None, "", "---", "!!!", "日本"])
def test_hostname_falls_back_to_the_uuid(name):
    assert hostname_for(name, UUID) == "instance-0b7e4f1e"


def test_instance_meta_is_what_the_guest_may_learn():
    spec = make_spec(str(uuidlib.uuid4()), name="Web 1", user_data="#cloud-config\n",
                     ssh_key="ssh-ed25519 AAAA me")
    meta = instance_meta(spec)
    assert {k: meta[k] for k in ("uuid", "name", "hostname", "user_data", "ssh_key")} == {
        "uuid": spec["uuid"], "name": "Web 1", "hostname": "web-1",
        "user_data": "#cloud-config\n", "ssh_key": "ssh-ed25519 AAAA me"}
    assert "project_id" not in meta and "allocations" not in meta
    json.dumps(meta)


def test_instance_meta_without_a_name_uses_the_uuid():
    spec = make_spec(str(uuidlib.uuid4()))
    del spec["name"]
    meta = instance_meta(spec)
    assert meta["name"] == spec["uuid"] and meta["hostname"] == f"instance-{spec['uuid'][:8]}"
    assert meta["user_data"] is None and meta["ssh_key"] is None
