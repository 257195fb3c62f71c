"""`schedule.py list --host/--state` and `schedule.py console --follow`, as real processes
against real etcd, Placement and compute daemons (fake driver)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.drivers.fake import boot_log
from etcd_compute.ops.console_follow import RESTARTED
from tests.compute.helpers import claim_and_send, make_spec, wait_state, write_as_the_host
from tests.support import REPO, wait_for
from tools.local_services import pid_alive, stop_pid


def alive(store: Any, config: dict[str, Any]) -> str:
    rp = config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what=f"heartbeat of {rp}")
    return rp


def test_list_by_host_name_or_uuid_and_by_state(start_compute, compute_config, host_config,
                                                store, placement, run_schedule):
    other = host_config("list-host-b")
    start_compute(compute_config, name="a")
    start_compute(other, name="b")
    a, b = alive(store, compute_config), alive(store, other)
    on_a = [make_spec(a) for _ in range(2)]
    on_b, failed_b = make_spec(b), make_spec(b, image="file:///no/such/image")
    for spec in [*on_a, on_b, failed_b]:
        claim_and_send(store, placement, spec)
    for spec in [*on_a, on_b]:
        wait_state(store, spec["uuid"], "ACTIVE")
    wait_state(store, failed_b["uuid"], "ERROR")

    def uuids(*args: str) -> set[str]:
        run = run_schedule("list", *args)
        assert run.code == 0, run.stderr
        return {line.split()[0] for line in run.stdout.splitlines()[1:]}

    name_a = compute_config["compute"]["name"]
    assert uuids("--host", name_a) == {s["uuid"] for s in on_a}
    assert uuids("--host", b) == {on_b["uuid"], failed_b["uuid"]}
    assert uuids("--host", "list-host-b", "--state", "error") == {failed_b["uuid"]}
    assert uuids("--state", "Active") == {s["uuid"] for s in [*on_a, on_b]}
    assert uuids("--host", a, "--state", "ERROR") == set()
    listed = run_schedule("list", "--state", "ERROR", "--json")
    assert listed.code == 0
    (record,) = listed.json()
    assert (record["uuid"], record["host"], record["state"]) == (failed_b["uuid"], b, "ERROR")
    assert "not found" in record["error"]

    unknown = run_schedule("list", "--state", "running")
    assert unknown.code == 2 and unknown.stdout == ""
    assert unknown.stderr == ("schedule.py: error: --state 'running': no such state; one of "
                              "SCHEDULED, BUILDING, ACTIVE, SHUTOFF, STOPPING, STARTING, "
                              "SUSPENDED, SUSPENDING, RESUMING, PAUSED, PAUSING, UNPAUSING, "
                              "REBOOTING, REBUILDING, "
                              "RESIZING, SNAPSHOTTING, FILTERING, PLUGGING, MIGRATING, MIGRATED, "
                              "INCOMING, "
                              "RESCHEDULING, ERROR, DELETING, DELETED\n")
    nohost = run_schedule("list", "--host", "hv-typo")
    assert nohost.code == 1 and nohost.stderr.count("\n") == 1
    assert "no host 'hv-typo'" in nohost.stderr


class Follow:
    """`schedule.py console UUID --follow` as a real process; its output as it comes."""

    def __init__(self, schedule_yaml: Path, uuid: str, *extra: str):
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "schedule.py"), "--config", str(schedule_yaml),
             "console", uuid, "--follow", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=REPO,
            start_new_session=True)
        self.chunks: list[bytes] = []
        self.err_chunks: list[bytes] = []
        self.readers = [threading.Thread(target=self._read, args=(stream, chunks), daemon=True)
                        for stream, chunks in ((self.process.stdout, self.chunks),
                                               (self.process.stderr, self.err_chunks))]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: Any, chunks: list[bytes]) -> None:
        while chunk := os.read(stream.fileno(), 65536):
            chunks.append(chunk)

    @property
    def out(self) -> str:
        return b"".join(self.chunks).decode()

    @property
    def err(self) -> str:
        return b"".join(self.err_chunks).decode()

    def shows(self, text: str, timeout: float = 10) -> None:
        wait_for(lambda: self.out == text, timeout, 0.05,
                 what=f"the follow to show {text!r} (it shows {self.out!r})")

    def ends(self, timeout: float = 15) -> tuple[int, str]:
        code = self.process.wait(timeout)
        for reader in self.readers:
            reader.join(5)
        return code, self.err

    def stop(self) -> None:
        if pid_alive(self.process.pid):
            stop_pid(self.process.pid, timeout=5)


@pytest.fixture
def follow(schedule_yaml: Path) -> Iterator[Any]:
    started: list[Follow] = []

    def start(uuid: str, *extra: str) -> Follow:
        started.append(Follow(schedule_yaml, uuid, *extra))
        return started[-1]

    yield start
    for process in started:
        process.stop()


def publish(store: Any, host: str, uuid: str, text: str, truncated: bool = False) -> None:
    """What the compute does when the guest's log changed (the operator may write it too)."""
    store.put(messages.CONSOLE, store.keys.console(host, uuid),
              {"uuid": uuid, "text": text, "updated_at": time.time(), "truncated": truncated})


def active_with_console(store: Any, placement: Any, rp: str) -> dict[str, Any]:
    spec = make_spec(rp)
    claim_and_send(store, placement, spec)
    wait_state(store, spec["uuid"], "ACTIVE")
    wait_for(lambda: store.get(store.keys.console(rp, spec["uuid"])), 15,
             what="the console published")
    return spec


def test_follow_prints_what_is_new_escaped_until_the_instance_is_deleted(
        start_compute, compute_config, store, placement, run_schedule, follow):
    start_compute(compute_config)
    rp = alive(store, compute_config)
    spec = active_with_console(store, placement, rp)
    uuid = spec["uuid"]
    first = boot_log(uuid)
    following = follow(uuid)
    following.shows(first)

    # The guest writes on: only the new part, as it comes (a watch, not a poll).
    publish(store, rp, uuid, first + "login: ")
    following.shows(first + "login: ")
    # Its log rotated, with a terminal escape in it: a marker on a line of its own, then the
    # whole new tail, the escape shown escaped.
    publish(store, rp, uuid, "\x1b[2Jfresh log\n")
    following.shows(first + "login: \n" + RESTARTED + "\n" + "\\x1b[2Jfresh log\n")

    destroyed = run_schedule("destroy", uuid)
    assert destroyed.code == 0, destroyed.stderr
    started = time.monotonic()
    code, stderr = following.ends()
    assert code == 0, stderr
    assert time.monotonic() - started < 10
    assert following.out.endswith(
        f"\\x1b[2Jfresh log\n--- instance {uuid} DELETED: end of its console ---\n")
    assert "Traceback" not in stderr


def test_follow_waits_for_a_build_and_stops_on_sigterm(start_compute, compute_config, store,
                                                       placement, follow):
    compute = start_compute(compute_config)
    rp = alive(store, compute_config)
    # A build its host holds until the follow waits for it: the host is down, and its
    # record says BUILDING (as a host that died mid-build leaves it).
    assert compute.terminate() == 0
    spec = make_spec(rp)
    placement.claim(spec["uuid"], spec["allocations"], "p", "u")
    write_as_the_host(compute_config, spec, "BUILDING")
    following = follow(spec["uuid"], "--json")
    # Not published yet: it waits (saying so on stderr), then shows it once ACTIVE (the
    # host back, the build resumed).
    wait_for(lambda: "waiting for the console" in following.err, 30,
             what=f"the follow to wait (its stderr: {following.err!r})")
    assert following.out == ""
    start_compute(compute_config)
    wait_for(lambda: following.out, 30, what="the console once ACTIVE")
    line = json.loads(following.out.splitlines()[0])
    assert line == {"uuid": spec["uuid"], "restarted": False,
                    "text": boot_log(spec['uuid'])}
    following.process.send_signal(signal.SIGTERM)
    code, stderr = following.ends(timeout=5)
    assert code == 0
    assert "waiting for the console" in stderr and "state BUILDING" in stderr
    assert "Traceback" not in stderr
