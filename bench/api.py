"""The compute API measured (issue 22): `schedule.py api` as deployed (gunicorn with its
default workers and threads, `auth_token` against a Keystone), creates of an m1.tiny
(`VCPU:1,MEMORY_MB:256,DISK_GB:1`, the other variants' query) by Nova's `POST /servers`
from clients holding a project member's token.

(api1) one client, one create after the other: the create's latency, and create ->
BUILDING (the client's clock just before its POST to the host's BUILDING record's
`updated_at`; both clocks are this machine's). (api32) 32 client processes at once:
servers a second, against the suite's batched-POST floor; (api32s) the same with the
scheduler service leading (the API hands its creates to it). The API's RSS (gunicorn's
master and workers) once started and after the variants.

Keystone and the API start on the first API variant of a suite (plain HTTP, as the
suite's etcd and Placement) and stop with the suite.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import psutil

from bench.placements import Placed, RunResult
from etcd_compute.config import deep_merge
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient
from tools.local_services import KeystoneServer
from tools.local_services import cloud as local_cloud
from tools.local_services.compute_api import ComputeApiServer

FLAVOR_ID = "1"  # m1.tiny as the bench asks: VCPU 1, MEMORY_MB 256, DISK_GB 1
IMAGE = "file:///dev/null"
USER = "demo"
PLACED_TIMEOUT = 60.0
# API variants run on another gunicorn shape than the default (workers, threads): the RSS
# target against the throughput target, in one run.
SHAPED = {"api32-2x8": (2, 8)}


class ApiCloud:
    """Keystone and `schedule.py api` for one suite, started on first use; other
    workers x threads shapes of the API (`ensure(config, shape=(1, 16))`) beside it, each
    its own gunicorn, its RSS reported as "after WxT"."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir / "api"
        self.keystone: KeystoneServer | None = None
        self.api: ComputeApiServer | None = None
        self.shaped: dict[tuple[int, int], ComputeApiServer] = {}
        self.token = ""
        self.rss: dict[str, dict[str, float]] = {}

    def ensure(self, config: dict[str, Any],
               shape: tuple[int, int] | None = None) -> ComputeApiServer:
        if self.api is None:
            self._start(config)
        assert self.api is not None
        if shape is None:
            return self.api
        if shape not in self.shaped:
            workers, threads = shape
            self.shaped[shape] = ComputeApiServer.create(
                self.run_dir / f"{workers}x{threads}").start(deep_merge(
                    self._api_config(config),
                    {"api": {"workers": workers, "threads": threads}}))
        return self.shaped[shape]

    def _start(self, config: dict[str, Any]) -> None:
        self.keystone = KeystoneServer.create(self.run_dir / "keystone")
        for user in ("admin", local_cloud.SERVICE_USER, USER):
            self.keystone.password(user)
        self.keystone.start()
        local_cloud.bootstrap(self.keystone)
        _seed_flavor(config)
        self.api = ComputeApiServer.create(self.run_dir).start(self._api_config(config))
        self.token = self.keystone.session(USER, None, USER).get_token()
        time.sleep(1.0)
        self.rss["started"] = self.rss_mb()

    def _api_config(self, config: dict[str, Any]) -> dict[str, Any]:
        assert self.keystone is not None
        return deep_merge(config, {"api": {
            "image_url_prefixes": ["file:///dev/"],
            # Nova's default quota (10 instances) would refuse the run, not measure it.
            "quotas": {"instances": -1, "cores": -1, "ram": -1},
            "keystone_authtoken": {
                **self.keystone.client_section(local_cloud.SERVICE_USER, None, "service"),
                "auth_type": "password"}}})

    def prepare(self, config: dict[str, Any], keys: set[str]) -> None:
        """Start now what the variants `keys` will use: a server's start is no variant's
        CPU (the meter reads the API and Keystone from before the first round)."""
        if any(key.startswith("api") for key in keys):
            self.ensure(config)
        for key, shape in SHAPED.items():
            if key in keys:
                self.ensure(config, shape)

    def cpu_roles(self) -> dict[str, list[int] | int | None]:
        """The API's servers (each shape's gunicorn master) and Keystone, for `CpuMeter`."""
        servers = [self.api, *self.shaped.values()]
        return {"api": [server.pid for server in servers if server is not None and server.pid],
                "keystone": self.keystone.pid if self.keystone is not None else None}

    def rss_mb(self, server: ComputeApiServer | None = None) -> dict[str, float]:
        """gunicorn's master alone, with its workers, and their PSS (shared pages counted
        once: what the API costs the machine)."""
        server = server or self.api
        if server is None or not server.pid:
            return {}
        master = psutil.Process(server.pid)
        own = total = master.memory_info().rss
        pss = master.memory_full_info().pss
        for child in master.children(recursive=True):
            try:
                total += child.memory_info().rss
                pss += child.memory_full_info().pss
            except psutil.Error:
                continue
        return {"main_mb": own / 2**20, "with_workers_mb": total / 2**20,
                "pss_mb": pss / 2**20}

    def stop(self) -> None:
        if self.api is not None:
            self.rss["after"] = self.rss_mb()
            self.api.stop()
        for (workers, threads), server in self.shaped.items():
            self.rss[f"after {workers}x{threads}"] = self.rss_mb(server)
            server.stop()
        if self.keystone is not None:
            self.keystone.stop()


def _seed_flavor(config: dict[str, Any]) -> None:
    from etcd_compute.api.objects.flavors import Flavor, FlavorExists, Flavors

    with Store(config["etcd"]) as store:
        try:
            Flavors(store).create(Flavor(FLAVOR_ID, "m1.tiny", 1, 256, 1))
        except FlavorExists:
            pass


def client(endpoint: str, token: str, count: int) -> RunResult:
    """One API client: `count` creates, one after the other (a process of its own)."""
    import requests

    session = requests.Session()
    session.headers.update({"X-Auth-Token": token})
    result = RunResult()
    wall = time.perf_counter()
    for index in range(count):
        body = {"server": {"name": f"bench-{index}", "flavorRef": FLAVOR_ID,
                           "imageRef": IMAGE}}
        asked_at, started = time.time(), time.perf_counter()
        response = session.post(f"{endpoint}/servers", json=body, timeout=120)
        if response.status_code != 202:
            result.errors.append(f"POST /servers {response.status_code}: "
                                 f"{response.text[:300]}")
            continue
        result.latencies.append(time.perf_counter() - started)
        uuid = response.json()["server"]["id"]
        result.placed.append(Placed(uuid, "", {}))
        result.started_at[uuid] = asked_at
    result.wall_seconds = time.perf_counter() - wall
    return result


def where_placed(config: dict[str, Any], result: RunResult) -> None:
    """Each created server's provider and claim, from Placement (the API answers with
    the server, not its host)."""
    placement = PlacementClient(config["placement"])
    deadline = time.monotonic() + PLACED_TIMEOUT
    for placed in result.placed:
        while True:
            allocations = placement.get(f"/allocations/{placed.uuid}")["allocations"]
            if allocations:
                placed.host, placed.allocations = next(iter(allocations.items()))
                break
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"server {placed.uuid} has no claim in Placement")
            time.sleep(0.1)


# ------------------------------------------------------------------ the report's rows


def targets(suite: dict[str, Any], backend: str) -> list[tuple[str, str, str, str]]:
    """Issue 22's API targets: 32 clients against the batched-POST floor, one client's
    create -> BUILDING against the toy's (a) p50, the API's RSS."""
    v, floor, rows = suite["variants"], suite.get("floor", {}), []
    for key in ("api32", "api32s", *SHAPED):
        if key in v and "post_batched" in floor:
            ratio = v[key]["instances_per_second"] / floor["post_batched"]["instances_per_second"]
            rows.append((f"({key}) 32 API clients >= 0.6x Placement floor (batched POST)",
                         backend, f"{ratio:.2f}x",
                         _verdict(ratio >= 0.6, f"{ratio / 0.6:.1%} of target")))
    building = v.get("api1", {}).get("create_to_building_ms")
    if building and "a" in v:
        ours, toy = building["p50"], v["a"]["latency_p50_ms"]
        rows.append(("(api1) one client's create -> BUILDING p50 <= (a) p50", backend,
                     f"{ours:.0f} vs {toy:.0f} ms",
                     _verdict(ours <= toy, f"{ours / toy:.2f}x the toy's")))
    rss = suite.get("api_rss", {}).get("after")
    if rss:
        whole, master = rss["with_workers_mb"], rss["main_mb"]
        rows.append(("API RSS <= 150 MB (gunicorn master and its workers, after the variants)",
                     backend, f"{whole:.0f} MB (master {master:.0f})",
                     _verdict(whole <= 150, f"{whole / 150:.2f}x the target")))
    return rows


def markdown_lines(suite: dict[str, Any]) -> list[str]:
    v, lines = suite["variants"], []
    for key in ("api1", "api32", "api32s", *SHAPED):
        building = v.get(key, {}).get("create_to_building_ms")
        if building:
            lines.append(f"({key}) create -> BUILDING (the client's clock before its POST to "
                         f"the BUILDING record): p50 {building['p50']:.1f} ms, p99 "
                         f"{building['p99']:.1f} ms over {building['count']}.")
    for when, rss in suite.get("api_rss", {}).items():
        if rss:
            lines.append(f"Compute API RSS ({when}): gunicorn master {rss['main_mb']:.0f} MB, "
                         f"with its workers {rss['with_workers_mb']:.0f} MB (PSS, shared "
                         f"pages counted once: {rss.get('pss_mb', 0):.0f} MB).")
    return ["", *lines] if lines else []


def _verdict(met: bool, detail: str) -> str:
    return "met" if met else f"MISSED ({detail})" if detail else "MISSED"
