"""compute/passwords.py (FakeStore, EventLoop): a password a guest POSTed is published under
its host's prefix and marked published; a deleted key (the API's clear) makes it go here
too, so the guest may POST again; only instances of ours, never twice, never a DELETED
one's."""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path

from etcd_compute import messages
from etcd_compute.compute.passwords import Passwords
from etcd_compute.instances import records, states
from etcd_compute.virt.instance_files import InstanceFiles
from tests.support import make_spec
from tests.unit.fakes import EventLoop, FakeStore, delete_event, put_event

RP, OTHER = str(uuidlib.uuid4()), str(uuidlib.uuid4())


class Host:
    def __init__(self, tmp_path: Path) -> None:
        self.store, self.loop = FakeStore(), EventLoop()
        self.dir = tmp_path / "instances"
        self.passwords = Passwords(self.store, [RP], str(self.dir), self.loop.post)

    def instance(self, state: str = states.ACTIVE, host: str = RP) -> tuple[str, InstanceFiles]:
        spec = make_spec(host)
        record = records.moved(records.new_record(spec, states.BUILDING, "h"), state)
        self.store.put(messages.INSTANCE_RECORD, self.store.keys.record(host, spec["uuid"]),
                       record)
        files = InstanceFiles.of(self.dir, spec["uuid"])
        files.create()
        return spec["uuid"], files

    def published(self, uuid: str, host: str = RP) -> str | None:
        message = self.store.read(messages.SERVER_PASSWORD,
                                  self.store.keys.password(host, uuid))[0]
        return None if message is None else message["password"]

    def scan(self) -> None:
        self.passwords.scan()
        self.loop.drain()


def test_a_posted_password_is_published_once_and_marked(tmp_path):
    host = Host(tmp_path)
    uuid, files = host.instance()
    assert files.keep_password("s3cret\n")
    host.scan()
    assert host.published(uuid) == "s3cret\n" and files.password_is_published("s3cret\n")
    revision = host.store.read(messages.SERVER_PASSWORD, host.store.keys.password(RP, uuid))[1]
    host.scan()  # nothing new: nothing written again
    assert host.store.read(messages.SERVER_PASSWORD,
                           host.store.keys.password(RP, uuid))[1] == revision


def test_a_scan_hands_a_password_over_once_until_the_main_loop_took_it(tmp_path):
    host = Host(tmp_path)
    _, files = host.instance()
    files.keep_password("x")
    host.passwords.scan()
    host.passwords.scan()
    assert len(host.loop.queue) == 1


def test_a_password_of_an_instance_not_ours_or_deleted_is_not_published(tmp_path):
    host = Host(tmp_path)
    gone, gone_files = host.instance(states.DELETED)
    elsewhere, other_files = host.instance(host=OTHER)
    stray = InstanceFiles.of(host.dir, str(uuidlib.uuid4()))
    stray.create()
    for files in (gone_files, other_files, stray):
        files.keep_password("p")
    host.scan()
    assert host.published(gone) is None and host.published(elsewhere, OTHER) is None
    assert not any(f.password_is_published("p") for f in (gone_files, other_files, stray))
    host.scan()
    assert host.loop.queue == []  # left alone until the password changes


def test_a_directory_not_named_by_a_uuid_is_not_looked_at(tmp_path):
    host = Host(tmp_path)
    odd = host.dir / "not-a-uuid"
    odd.mkdir(parents=True)
    (odd / "password").write_text("p")
    host.scan()
    assert host.loop.queue == [] and host.store.get_prefix(host.store.keys.passwords(RP))[0] == []


def test_a_cleared_password_goes_and_the_guest_may_post_again(tmp_path):
    host = Host(tmp_path)
    uuid, files = host.instance()
    files.keep_password("one")
    host.scan()
    host.store.delete(host.store.keys.password(RP, uuid))  # the API's DELETE
    host.passwords.cleared(uuid)                          # its watch event
    assert files.read_password() is None and not files.password_published.exists()
    assert files.keep_password("two")
    host.scan()
    assert host.published(uuid) == "two"


def test_only_a_deleted_password_key_of_ours_clears_the_password_here(tmp_path):
    host = Host(tmp_path)
    uuid, files = host.instance()
    files.keep_password("p")
    for event in (put_event(host.store.keys.password(RP, uuid), b"{}", 9),
                  delete_event(host.store.keys.password(OTHER, uuid), 9),
                  delete_event(host.store.keys.console(RP, uuid), 9)):
        host.passwords.on_event(event)
    assert files.read_password() == "p"
    host.passwords.on_event(delete_event(host.store.keys.password(RP, uuid), 10))
    assert files.read_password() is None


def test_a_clear_missed_while_away_is_found_by_sync(tmp_path):
    host = Host(tmp_path)
    cleared, cleared_files = host.instance()
    kept, kept_files = host.instance()
    new, new_files = host.instance()
    for files in (cleared_files, kept_files):
        files.keep_password("p")
    host.scan()
    host.store.delete(host.store.keys.password(RP, cleared))
    new_files.keep_password("not published yet")
    host.passwords.sync()
    assert cleared_files.read_password() is None
    assert kept_files.read_password() == "p" and host.published(kept) == "p"
    assert new_files.read_password() == "not published yet"  # the scan publishes it
    host.scan()
    assert host.published(new) == "not published yet"
