"""Chaos: hosts killed (SIGKILL and power loss) or cut off from etcd, at random, under load.

Four fake-driver computes, each reaching etcd through its own cuttable proxy, one
controller, and a client that keeps creating and destroying instances through
schedule.py. For CHAOS_ROUNDS rounds a random live host is killed or partitioned;
each failed host comes back after a random time, sometimes before the controller
acts (the grace period) and sometimes after. Then everything is restored and the
test checks what the issue promises: no instance ran on two hosts at overlapping
times, every `rebuild` instance is ACTIVE on a live host, every `error` instance
that lost its host is ERROR with its claim freed, and Placement's usage on every
provider is exactly what the live instances on it hold.

A failing run prints its seed; CHAOS_SEED=<seed> replays the same choices.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from etcd_compute.config import deep_merge
from etcd_compute.drivers.fake import FakeDriver
from etcd_compute.instances import records, states
from tests.compute.guests import overlaps, power_loss
from tests.compute.test_host_failure import rp_of
from tests.support import RESOURCES, wait_for
from tools.local_services.proxy import CuttableProxy

ROUNDS = int(os.environ.get("CHAOS_ROUNDS", "20"))
HOSTS = 4
TTL, MARGIN, GRACE = 2, 0.6, 1
# Live instances the client keeps at most: two hosts (4 VCPU each) hold them all, so a
# rebuild always finds room while at most two hosts are down.
MAX_LIVE = 6
QUERY = ",".join(f"{rc}:{n}" for rc, n in sorted(RESOURCES.items()))
ENDED = (states.ERROR, states.DELETED)


@dataclass
class Host:
    config: dict[str, Any]
    proxy: CuttableProxy
    process: Any = None
    down: str | None = None  # "killed" or "cut", while failed
    since: float = 0.0


@dataclass
class Client:
    """Creates and destroys instances through the CLI while the chaos goes on."""

    run_schedule: Any
    rng: random.Random
    created: dict[str, str] = field(default_factory=dict)  # uuid -> policy
    destroyed: set[str] = field(default_factory=set)
    stopping: threading.Event = field(default_factory=threading.Event)
    failures: list[str] = field(default_factory=list)

    def live(self) -> list[str]:
        return [u for u in self.created if u not in self.destroyed]

    def run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 (a client that died is a failure, not a warning)
            self.failures.append(f"client died: {exc.__class__.__name__}: {exc}")

    def _run(self) -> None:
        while not self.stopping.wait(self.rng.uniform(0.2, 0.8)):
            live = self.live()
            if len(live) < MAX_LIVE and (not live or self.rng.random() < 0.7):
                policy = self.rng.choice(["rebuild", "error"])
                made = self.run_schedule(f"resources={QUERY}", "--on-host-failure", policy,
                                         "--json")
                if made.code == 0:
                    for placed in made.json()["instances"]:
                        self.created[placed["uuid"]] = policy
                elif made.code not in (1, 3):  # no valid host / etcd cut: fine under chaos
                    self.failures.append(f"create: {made.code} {made.stderr.strip()}")
            elif live:
                uuid = self.rng.choice(live)
                gone = self.run_schedule("destroy", uuid)
                if gone.code == 0:
                    self.destroyed.add(uuid)
                elif gone.code != 3:
                    self.failures.append(f"destroy {uuid}: {gone.code} {gone.stderr.strip()}")


def test_random_kills_and_partitions_under_load_never_run_an_instance_twice(
        start_compute, start_controller, compute_config, host_config, schedule_config, store,
        placement, run_schedule):
    seed = int(os.environ.get("CHAOS_SEED", time.time_ns() % 1_000_000))
    rng = random.Random(seed)
    print(f"chaos seed {seed}")
    etcd_host, etcd_port = compute_config["etcd"]["endpoints"][0].rsplit(":", 1)
    timing = {"compute": {"heartbeat_ttl": TTL, "fence_margin_seconds": MARGIN},
              "driver": {"fake": {"build_seconds": 0.2}}}
    hosts: list[Host] = []
    try:
        for n in range(HOSTS):
            proxy = CuttableProxy(etcd_host, int(etcd_port)).start()
            config = deep_merge(host_config(f"chaos-{n}"), {
                **timing, "etcd": {"endpoints": [proxy.endpoint]}})
            hosts.append(Host(config, proxy))
        start_controller(deep_merge(schedule_config, {"scheduler": {
            "host_failure_grace_seconds": GRACE, "controller_lease_ttl": 3}}))
        for host in hosts:
            host.process = start_compute(host.config, name=host.config["compute"]["name"])
        for host in hosts:
            wait_for(lambda h=host: store.get(store.keys.alive(rp_of(h.config))), 30,
                     what="heartbeats")
        wait_for(lambda: store.get(store.keys.leader()), 20, what="a controller to lead")

        client = Client(run_schedule, random.Random(seed + 1))
        load = threading.Thread(target=client.run, name="chaos-client", daemon=True)
        load.start()
        for _ in range(ROUNDS):
            for host in hosts:  # bring back those failed long enough (random: before or
                if host.down and time.monotonic() - host.since > rng.uniform(1, 6):  # after
                    restore(host, start_compute)                                   # grace)
                supervise(host, start_compute)
            up = [h for h in hosts if not h.down]
            if len(up) > 2:
                fail(rng.choice(up), rng.choice(["killed", "cut"]))
            time.sleep(rng.uniform(1.0, 2.5))
        client.stopping.set()
        load.join(60)
        for host in hosts:
            if host.down:
                restore(host, start_compute)
        time.sleep(1)
        for host in hosts:
            supervise(host, start_compute)
        for host in hosts:
            wait_for(lambda h=host: store.get(store.keys.alive(rp_of(h.config))), 30,
                     what=f"{host.config['compute']['name']} back")

        settled = wait_for(lambda: settle(store, client), 90,
                           what=f"every instance settled (seed {seed})")
        assert client.failures == [], client.failures
        assert len(client.created) >= ROUNDS // 4, "too little load to prove anything"
        check_invariants(store, placement, hosts, client, settled, seed)
    finally:
        for host in hosts:
            host.proxy.stop()


def fail(host: Host, how: str) -> None:
    print(f"{time.time():.3f} {host.config['compute']['name']} {how}")
    host.down, host.since = how, time.monotonic()
    if how == "killed":
        host.process.kill9()
        power_loss(host.config)  # the machine went with it
    else:
        host.proxy.cut()


def restore(host: Host, start_compute: Any) -> None:
    print(f"{time.time():.3f} {host.config['compute']['name']} back ({host.down})")
    if host.down == "killed":
        host.process = start_compute(host.config, name=host.config["compute"]["name"])
    else:
        host.proxy.restore()
    host.down = None


def supervise(host: Host, start_compute: Any) -> None:
    """What systemd's Restart=on-failure does (contrib/ecompute.service): a compute that
    started while cut off exits 3 (etcd unreachable, one line) and is started again.
    Any other exit is a crash, and fails the test."""
    process = host.process
    if host.down or process.alive():
        return
    code = process.process.returncode
    assert code == 3, f"{host.config['compute']['name']} exited {code}: {process.log()[-2000:]}"
    print(f"{time.time():.3f} {host.config['compute']['name']} restarted (it exited 3)")
    host.process = start_compute(host.config, name=host.config["compute"]["name"])


def settle(store: Any, client: Client) -> dict[str, tuple[str | None, Any]] | None:
    """{uuid: (host, record)} once no instance is in a passing state, else None."""
    found = {uuid: records.find(store, uuid) for uuid in client.created}
    for uuid, (_host, read) in found.items():
        if read.state is not None and read.state not in ENDED + (states.ACTIVE,):
            return None
        if uuid in client.destroyed and read.state not in (None, states.DELETED):
            return None
    return found


def check_invariants(store: Any, placement: Any, hosts: list[Host], client: Client,
                     settled: dict[str, tuple[str | None, Any]], seed: int) -> None:
    where = f"(seed {seed})"
    assert overlaps([h.config for h in hosts]) == [], where
    live_on: dict[str, set[str]] = {rp_of(h.config): set() for h in hosts}
    for uuid, (host, read) in settled.items():
        policy = client.created[uuid]
        if uuid in client.destroyed or read.state in (None, states.DELETED):
            assert placement.get_allocations(uuid)["allocations"] == {}, (uuid, where)
        elif read.state == states.ERROR:
            assert policy == "error", (uuid, read.record, where)
            assert "is down" in read.record["error"], (uuid, read.record, where)
            assert placement.get_allocations(uuid)["allocations"] == {}, (uuid, where)
        else:
            assert read.state == states.ACTIVE and host in live_on, (uuid, read, where)
            assert set(placement.get_allocations(uuid)["allocations"]) == {host}, (uuid, where)
            live_on[host].add(uuid)
    for host in hosts:
        rp = rp_of(host.config)
        # Placement holds exactly the live instances' resources, and each host's
        # hypervisor runs exactly those guests: no stale copy survived a return.
        assert placement.get_usages(rp) == {
            rc: n * len(live_on[rp]) for rc, n in RESOURCES.items()}, (rp, where)
        # A host heartbeats before its start's reconcile powers on what a power loss
        # stopped, so "back" may come a moment before its guests run again: wait for it.
        with contextlib.suppress(AssertionError):
            wait_for(lambda h=host, r=rp: FakeDriver(h.config).running() == live_on[r], 30,
                     what=f"{rp}'s guests running again")
        assert FakeDriver(host.config).running() == live_on[rp], (rp, where)
