"""Measuring what a cluster fault does to the hosts: when work resumed, whether a lease
lapsed, and that nothing was built twice."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient
from tests.compute.helpers import build_events, claim_and_send, record_entry
from tests.support import wait_for


def rp_of(config: dict[str, Any]) -> str:
    return config["compute"]["uuid"]


def wait_alive(store: Store, rp_uuid: str, timeout: float = 30) -> None:
    wait_for(lambda: store.get(store.keys.alive(rp_uuid)), timeout, what=f"/alive/{rp_uuid}")


def send_until_written(store: Store, placement: PlacementClient, spec: dict[str, Any],
                       timeout: float = 30) -> int:
    """claim_and_send, writing the spec again while etcd cannot take it (a leader election):
    what a scheduler does when a write failed. Returns how many writes failed. A failed
    write may still have been applied, so the host can see the same spec twice: that is
    part of what the tests check (it must build once)."""
    failures = 0
    try:
        claim_and_send(store, placement, spec)
        return 0
    except ServiceUnavailable:
        failures += 1
    deadline = time.monotonic() + timeout
    while True:
        try:
            store.put(messages.INSTANCE_SPEC, store.keys.spec(spec["host"], spec["uuid"]), spec)
            return failures
        except ServiceUnavailable:
            failures += 1
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Writer(threading.Thread):
    """Sends `specs` one after another, `interval` apart; `written[uuid]` is the wall time
    each write was acknowledged (it is in etcd from then on)."""

    def __init__(self, store: Store, placement: PlacementClient, specs: list[dict[str, Any]],
                 interval: float):
        super().__init__(name="writer", daemon=True)
        self.store, self.placement, self.specs, self.interval = store, placement, specs, interval
        self.written: dict[str, float] = {}
        self.failed_writes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for spec in self.specs:
                self.failed_writes += send_until_written(self.store, self.placement, spec)
                self.written[spec["uuid"]] = time.time()
                time.sleep(self.interval)
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc


class AliveSampler(threading.Thread):
    """Reads /alive/<rp> every `every` s through its own client: (wall time, lease id of
    the key or None when it is absent); reads that fail (no quorum, election) are skipped."""

    def __init__(self, config: dict[str, Any], rp_uuid: str, every: float = 0.1):
        super().__init__(name="alive-sampler", daemon=True)
        self.config, self.rp_uuid, self.every = config, rp_uuid, every
        self.samples: list[tuple[float, int | None]] = []
        self.failed_reads = 0
        self.halt = threading.Event()

    def run(self) -> None:
        with Store(self.config) as store:
            key = store.keys.alive(self.rp_uuid)
            while not self.halt.wait(self.every):
                try:
                    entry = store.get(key)
                except EtcdComputeError:  # unreachable, or a call cut short: unknown
                    self.failed_reads += 1
                    continue
                self.samples.append((time.time(), entry.lease if entry else None))

    def stop(self) -> None:
        self.halt.set()
        self.join(10)

    def lapses(self, lease: int) -> list[tuple[float, int | None]]:
        """Samples where the key was gone or held by another lease than `lease`."""
        return [(at, held) for at, held in self.samples if held != lease]


def building_at(store: Store, uuid: str) -> float:
    """When the host moved `uuid` to BUILDING: the first version of its record (the host
    creates it, BUILDING) read back from etcd's history, and its updated_at."""
    entry = record_entry(store, uuid)
    assert entry is not None, f"no record for {uuid}"
    response = store.client.get_response(entry.key, revision=entry.create_revision)
    first = messages.decode(messages.INSTANCE_RECORD, response.kvs[0].value)
    assert first["state"] == "BUILDING", f"first record of {uuid}: {first['state']}"
    return float(first["updated_at"])


def log_times(log: str, needle: str) -> list[float]:
    """Wall times of the daemon's log lines containing `needle` (logs.py's asctime:
    '2024-01-02 03:04:05,678', local time)."""
    times = []
    for line in log.splitlines():
        if needle in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.timestamp())
    return times


def build_faults(config: dict[str, Any], uuids: set[str]) -> dict[str, Any]:
    """What went wrong with building `uuids` on the host of `config`: never built, built
    more than once, a build started twice by one daemon run (all empty when right)."""
    events = build_events(config)
    built = Counter(e.uuid for e in events if e.event == "built")
    # One daemon run's attempts, between fences (a fence kills the builds in flight; they
    # are started again after it, which is no duplicate).
    # (One host's log: one daemon runs on it at a time.)
    fences = 0
    attempts: Counter[tuple[str, str]] = Counter()
    for e in events:
        if e.event == "fence":
            fences += 1
        elif e.event == "start":
            attempts[(e.uuid, f"{e.daemon}, after {fences} fence(s)")] += 1
    return {"never_built": sorted(uuids - set(built)),
            "built_twice": {u: n for u, n in built.items() if n > 1},
            "started_twice": {f"{u} (run {d})": n for (u, d), n in attempts.items() if n > 1}}


def etcd_peers(pid: int, endpoints: list[str]) -> list[str]:
    """Which of `endpoints` the process `pid` holds a TCP connection to now (the member
    its client talks to; the fault hits the host harder when it is the one killed)."""
    import psutil

    wanted = {tuple(e.rsplit(":", 1)) for e in endpoints}
    found = set()
    for conn in psutil.Process(pid).net_connections(kind="tcp"):
        if not conn.raddr or conn.status != psutil.CONN_ESTABLISHED:
            continue
        # gRPC connects from dual-stack sockets: IPv4 peers show as ::ffff:a.b.c.d.
        ip = conn.raddr.ip.removeprefix("::ffff:")
        if (ip, str(conn.raddr.port)) in wanted:
            found.add(f"{ip}:{conn.raddr.port}")
    return sorted(found)
