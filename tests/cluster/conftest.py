"""Several hosts for real: a 3-member etcd cluster and compute hosts in network namespaces.

For the whole package: one private network (a bridge in the root namespace,
10.77.X.0/24, a random X nobody here uses), three etcd members each in its own
namespace (TLS for clients and peers with the cluster PKI, client
certificates, RBAC on), and a Placement listening on the bridge address only.
Per test: a unique key prefix, an empty Placement, the cluster whole again (a
member an earlier test killed is restarted before the next one starts).

Clients name all three members (etcd.endpoints) with a short timeout, hosts
beat every second on a 6 s lease: the numbers these tests measure are then
seconds, not minutes. Everything started here is stopped by pid, and the
namespaces, veths and bridge are removed, whatever the tests did.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import COMPUTE, Pki, compute_name
from etcd_compute.placement import PlacementClient
from tests.conftest import OPERATOR_USER, DaemonProcess, stop_daemons, wipe_placement
from tests.support import REPO, Run, running, unavailable
from tools.local_services import PlacementServer
from tools.local_services.cluster import EtcdCluster
from tools.local_services.netns import Host, TestNetwork, netns_usable

ETCD_TIMEOUT = 2.0
# With etcd's default election timeout (an election takes up to ~4 s: etcd.election_seconds)
# and a 0.5 s fence margin, 6 s is the shortest whole TTL the config accepts (renewals
# every 1 s).
HEARTBEAT_TTL = 6
ROOM = {"VCPU": 64, "MEMORY_MB": 16384, "DISK_GB": 256}


# ------------------------------------------------------------------ the package's services


@pytest.fixture(scope="package")
def cluster_net() -> Iterator[TestNetwork]:
    if shutil.which("etcd") is None:
        unavailable("etcd is not installed (make install)")
    why = netns_usable()
    if why:
        unavailable(why)
    net = TestNetwork.create()
    try:
        yield net
    finally:
        net.delete()


@pytest.fixture(scope="package")
def etcd_cluster(tmp_path_factory: pytest.TempPathFactory, cluster_pki: Pki,
                 cluster_net: TestNetwork) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster.create(tmp_path_factory.mktemp("etcd-cluster"), cluster_pki,
                                 cluster_net)
    with running(cluster, lambda: cluster.start().enable_auth([OPERATOR_USER])):
        yield cluster


@pytest.fixture(scope="package")
def bridge_placement(tmp_path_factory: pytest.TempPathFactory, cluster_pki: Pki,
                     cluster_net: TestNetwork) -> Iterator[PlacementServer]:
    """Placement on the bridge address (hosts in namespaces reach it there), over TLS."""
    with running(PlacementServer.create(tmp_path_factory.mktemp("bridge-placement"),
                                        pki=cluster_pki, ip=cluster_net.gateway,
                                        name=f"placement-{cluster_net.id}")) as server:
        yield server


@pytest.fixture(autouse=True)
def cluster(etcd_cluster: EtcdCluster) -> EtcdCluster:
    """The cluster, whole before each test: members an earlier test killed run again."""
    for member in etcd_cluster.members:
        if not member.running():
            etcd_cluster.restart(member)
    etcd_cluster.wait_whole()
    return etcd_cluster


# ------------------------------------------------------------------ per test


@pytest.fixture
def cluster_prefix() -> str:
    return f"/cluster-{uuidlib.uuid4().hex[:12]}"


@pytest.fixture
def ops_etcd(cluster: EtcdCluster, cluster_prefix: str) -> dict[str, Any]:
    """The operator's etcd section: every member, the short timeout."""
    return cluster.client_config(cluster_prefix, OPERATOR_USER, timeout=ETCD_TIMEOUT)


@pytest.fixture
def ops_store(ops_etcd: dict[str, Any]) -> Iterator[Store]:
    store = Store(ops_etcd)
    yield store
    with contextlib.suppress(Exception):  # the cluster may be what the test broke
        store.client.delete_prefix(ops_etcd["prefix"] + "/")
    store.close()


@pytest.fixture
def ops_placement(bridge_placement: PlacementServer) -> PlacementClient:
    client = PlacementClient(bridge_placement.client_config(OPERATOR_USER))
    wipe_placement(client)
    return client


@pytest.fixture
def make_host(tmp_path: Path, cluster: EtcdCluster, bridge_placement: PlacementServer,
              cluster_pki: Pki, cluster_prefix: str) -> Callable[..., dict[str, Any]]:
    """A compute host's config (fake driver): its own provider uuid, certificate and etcd
    role (as `cluster.py host add` makes them), all three members, the short TTL."""

    def make(name: str, inventory: dict[str, int] | None = None, build_seconds: float = 0.05,
             workers: int = 2) -> dict[str, Any]:
        rp_uuid = str(uuidlib.uuid4())
        issued = cluster_pki.issue(compute_name(rp_uuid), COMPUTE)
        with Store(cluster.client_config(cluster_prefix, ROOT)) as root:
            EtcdAuth(root).add_host(rp_uuid)
        tls = {"ca_cert": str(cluster_pki.ca_cert), "cert": str(issued.cert),
               "key": str(issued.key)}
        state = tmp_path / f"{name}-state"
        overrides = {
            "etcd": {**cluster.client_config(cluster_prefix, timeout=ETCD_TIMEOUT), **tls},
            "placement": {**bridge_placement.client_config(), **tls, "timeout": 10.0},
            "logging": {"level": "DEBUG"},
            "compute": {
                "uuid": rp_uuid, "name": name, "state_dir": str(state),
                "instances_dir": str(state / "instances"), "heartbeat_ttl": HEARTBEAT_TTL,
                # A leader election (about 1-2 s) must not fence the host: the config
                # refuses timings that could not renew through one.
                "fence_margin_seconds": 0.5,
                "workers": workers, "job_timeout_seconds": 30, "shutdown_timeout_seconds": 10,
                "inventory": {rc: {"total": total, "reserved": 0, "allocation_ratio": 1.0}
                              for rc, total in (inventory or ROOM).items()},
            },
            "driver": {"name": "fake", "fake": {"build_seconds": build_seconds}},
        }
        config = configuration.deep_merge(defaults.COMPUTE_DEFAULTS, overrides)
        configuration.validate(config, "compute_config", "cluster test compute config")
        return config

    return make


class NetnsDaemon(DaemonProcess):
    """A DaemonProcess whose argv runs under `prefix` (`ip netns exec NS`, which execs in
    place: the pid is still the daemon's, stopped by pid as any other)."""

    def __init__(self, argv: list[str], log_path: Path, prefix: list[str]):
        super().__init__(argv, log_path)
        self.prefix = prefix

    def start(self) -> NetnsDaemon:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [*self.prefix, sys.executable, *self.argv], stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                start_new_session=True)
        return self


@pytest.fixture
def start_daemon(tmp_path: Path, cluster_net: TestNetwork) -> Iterator[
        Callable[..., NetnsDaemon]]:
    """Start compute.py with a config dict, in the root namespace or in `host`'s."""
    started: list[NetnsDaemon] = []

    def start(config: dict[str, Any], host: Host | None = None) -> NetnsDaemon:
        name = config["compute"]["name"]
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        prefix = cluster_net.run_in(host, []) if host else []
        daemon = NetnsDaemon([str(REPO / "compute.py"), "--config", str(path)],
                             tmp_path / f"{name}.log", prefix).start()
        started.append(daemon)
        return daemon

    yield start
    stop_daemons(started)


@pytest.fixture
def schedule_cli(tmp_path: Path, ops_etcd: dict[str, Any],
                 bridge_placement: PlacementServer) -> Callable[..., tuple[Run, float]]:
    """Run the real schedule.py as the operator; returns what it did and how long it took.
    host_subset_size 1: the best host always wins, so where requests land says what the
    filters let through (with 3 hosts, 3 would mean "any of them")."""
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "etcd": ops_etcd, "placement": bridge_placement.client_config(OPERATOR_USER),
        "scheduler": {"default_image": "file:///dev/null", "etcd_max_txn_ops": 4096,
                      "host_subset_size": 1}})
    configuration.validate(config, "schedule_config", "cluster test schedule config")
    path = tmp_path / "schedule.yaml"
    path.write_text(yaml.safe_dump(config))

    def run(*args: str, timeout: float = 60) -> tuple[Run, float]:
        started = time.monotonic()
        done = subprocess.run([sys.executable, str(REPO / "schedule.py"), "--config",
                               str(path), *args], capture_output=True, text=True,
                              timeout=timeout, cwd=REPO)
        return Run(done.returncode, done.stdout, done.stderr), time.monotonic() - started

    return run


@pytest.fixture
def figures(tmp_path: Path, request: pytest.FixtureRequest) -> Callable[..., None]:
    """Report measured figures: printed (pytest -s shows them) and appended as a JSON line
    to <tmp>/cluster-results.jsonl, and to $CLUSTER_RESULTS when set (to gather runs)."""

    def report(**values: Any) -> None:
        line = json.dumps({"test": request.node.name, "at": time.time(), **values},
                          sort_keys=True)
        print(f"\nCLUSTER FIGURES {line}")
        targets = [tmp_path / "cluster-results.jsonl"]
        if os.environ.get("CLUSTER_RESULTS"):
            targets.append(Path(os.environ["CLUSTER_RESULTS"]))
        for target in targets:
            with open(target, "a") as out:
                out.write(line + "\n")

    return report
