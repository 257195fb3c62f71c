"""Consoles (FakeStore, FakePool, EventLoop, the fake driver behind worker.py): the tail of an
ACTIVE guest's console is published, republished only when it changed, and followed for a
limited time."""

from __future__ import annotations

import concurrent.futures
import uuid as uuidlib
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.compute import consoles as consoles_module
from etcd_compute.compute import worker
from etcd_compute.compute.consoles import CONSOLE_FOLLOW_SECONDS, CONSOLE_MAX_BYTES, Consoles
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.instances import records, states
from tests.support import make_spec
from tests.unit.fakes import EventLoop, FakePool, FakeStore

RP = str(uuidlib.uuid4())


@pytest.fixture
def fake_worker(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """worker.py's driver, as a pool worker would have it: the fake driver under tmp_path."""
    monkeypatch.setattr(worker, "_driver", None)  # restored after the test
    worker.init_worker(deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path / "state"),
                    "instances_dir": str(tmp_path / "instances")},
        "driver": {"name": "fake"}}))


class Host:
    """A store, a pool and an event loop around one Consoles."""

    def __init__(self) -> None:
        self.store, self.pool, self.loop = FakeStore(), FakePool(), EventLoop()
        self.consoles = Consoles(self.store, self.pool, self.loop.post)

    def instance(self, state: str = states.ACTIVE) -> str:
        """An instance built by the driver, with a record in `state`."""
        spec = make_spec(RP)
        worker.build(spec)
        record = records.new_record(spec, states.BUILDING, "h")
        if state != states.BUILDING:
            record = records.moved(record, state)
        self.store.put(messages.INSTANCE_RECORD, self.store.keys.record(RP, spec["uuid"]), record)
        return spec["uuid"]

    def console(self, uuid: str) -> dict[str, Any] | None:
        return self.store.read(messages.CONSOLE, self.store.keys.console(RP, uuid))[0]

    def console_revision(self, uuid: str) -> int:
        return self.store.read(messages.CONSOLE, self.store.keys.console(RP, uuid))[1]

    def run(self) -> None:
        self.loop.drain(self.pool)


def test_following_an_active_instance_publishes_its_console(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    assert host.console(uuid) is None  # nothing written before the job ran
    host.run()
    console = host.console(uuid)
    assert console["uuid"] == uuid and console["truncated"] is False
    assert console["text"] == worker.driver().console(uuid) and uuid in console["text"]
    assert uuid in host.consoles.followed


def test_an_unchanged_console_is_not_written_again(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.run()
    revision, writes = host.console_revision(uuid), len(host.store.committed)
    host.consoles.refresh()
    host.run()
    assert host.console_revision(uuid) == revision
    assert len(host.store.committed) == writes


def test_a_changed_console_is_written_again(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.run()
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result({uuid: {"text": "login:", "diagnostics": None}})
    host.consoles.store_tails(future)
    assert host.console(uuid)["text"] == "login:"


def test_all_followed_consoles_are_read_in_one_job(fake_worker):
    host = Host()
    uuids = [host.instance() for _ in range(3)]
    for uuid in uuids:
        host.consoles.follow(RP, uuid)
    host.run()
    host.consoles.refresh()
    assert len(host.pool.pending) == 1
    _future, function, args = host.pool.pending[0]
    assert function is worker.consoles and args == (sorted(uuids), CONSOLE_MAX_BYTES)
    host.run()
    assert all(host.console(uuid) for uuid in uuids)


@pytest.mark.parametrize("state", [states.BUILDING, states.DELETING, states.ERROR])
def test_an_instance_that_is_not_active_is_forgotten_and_not_published(fake_worker, state):
    host = Host()
    uuid = host.instance(state)
    host.consoles.follow(RP, uuid)
    host.run()
    assert host.console(uuid) is None
    assert uuid not in host.consoles.followed


def test_an_instance_without_a_record_is_forgotten(fake_worker):
    host = Host()
    uuid = host.instance()
    host.store.delete(host.store.keys.record(RP, uuid))
    host.consoles.follow(RP, uuid)
    host.run()
    assert host.console(uuid) is None and host.consoles.followed == {}


def test_the_record_and_console_are_those_on_the_followed_host(fake_worker):
    host = Host()
    uuid = host.instance()
    other = str(uuidlib.uuid4())
    host.consoles.follow(other, uuid)  # no record of it there
    host.run()
    assert host.consoles.followed == {}
    assert host.store.get_prefix(host.store.keys.host(other))[0] == []
    assert host.console(uuid) is None
    host.consoles.follow(RP, uuid)
    host.run()
    assert host.console(uuid) is not None
    assert host.store.get_prefix(host.store.keys.host(other))[0] == []


def test_a_forgotten_instance_is_not_published(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.consoles.forget(uuid)
    host.run()
    assert host.console(uuid) is None


def test_a_console_is_followed_for_the_follow_time_then_dropped(fake_worker, monkeypatch):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.run()
    since = host.consoles.followed[uuid].since
    monkeypatch.setattr(consoles_module.time, "monotonic",
                        lambda: since + CONSOLE_FOLLOW_SECONDS - 1)
    host.consoles.refresh()
    assert uuid in host.consoles.followed and len(host.pool.pending) == 1
    host.run()
    monkeypatch.setattr(consoles_module.time, "monotonic",
                        lambda: since + CONSOLE_FOLLOW_SECONDS + 1)
    host.consoles.refresh()
    assert host.consoles.followed == {} and host.pool.pending == []


def test_only_follows_older_than_the_follow_time_are_dropped(fake_worker, monkeypatch):
    host = Host()
    old, new = host.instance(), host.instance()
    host.consoles.follow(RP, old)
    host.consoles.follow(RP, new)
    host.run()
    # `new` became ACTIVE much later than `old`.
    later = host.consoles.followed[old].since + CONSOLE_FOLLOW_SECONDS + 1
    host.consoles.followed[new].since = later - 10
    monkeypatch.setattr(consoles_module.time, "monotonic", lambda: later)
    host.consoles.refresh()
    assert set(host.consoles.followed) == {new}
    _future, _function, args = host.pool.pending[0]
    assert args[0] == [new]


def test_a_failed_or_cancelled_console_job_writes_nothing(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.pool.fail_next(concurrent.futures.TimeoutError())
    host.run()
    assert host.console(uuid) is None and uuid in host.consoles.followed
    cancelled: concurrent.futures.Future = concurrent.futures.Future()
    cancelled.cancel()
    host.consoles.store_tails(cancelled)
    assert host.console(uuid) is None


def test_a_console_at_the_size_limit_is_marked_truncated(fake_worker):
    host = Host()
    uuid = host.instance()
    host.consoles.followed[uuid] = consoles_module.ConsoleFollow(RP)
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result({uuid: {"text": "x" * CONSOLE_MAX_BYTES, "diagnostics": None}})
    host.consoles.store_tails(future)
    assert host.console(uuid)["truncated"] is True


def test_tails_of_instances_not_followed_are_ignored(fake_worker):
    host = Host()
    uuid = host.instance()
    future: concurrent.futures.Future = concurrent.futures.Future()
    future.set_result({uuid: {"text": "text", "diagnostics": None}})
    host.consoles.store_tails(future)
    assert host.console(uuid) is None


def test_the_guests_diagnostics_go_with_its_console_refreshed_while_it_is_followed(
        fake_worker, monkeypatch):
    host = Host()
    uuid = host.instance()
    host.consoles.follow(RP, uuid)
    host.run()
    published = host.console(uuid)
    assert published["diagnostics"]["state"] == "running"
    assert published["diagnostics"]["num_cpus"] == 1
    revision = host.console_revision(uuid)
    # The text did not change: written again for the diagnostics only after a while.
    host.consoles.refresh()
    host.run()
    assert host.console_revision(uuid) == revision
    follow = host.consoles.followed[uuid]
    follow.written -= consoles_module.DIAGNOSTICS_REFRESH_SECONDS
    host.consoles.refresh()
    host.run()
    assert host.console_revision(uuid) > revision
    assert host.console(uuid)["text"] == published["text"]
