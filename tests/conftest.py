"""Test harness: real etcd, real Placement, libvirt's test driver; Keystone and Glance.

Session-wide: one etcd and one Placement (SQLite, one worker) on random free
ports with temporary data; Keystone and Glance (TLS, SQLite, a file store) started
side by side the first time a test asks for either, bootstrapped as `make up` does
(`tools/local_services/cloud.py`). Per test: a unique etcd key prefix and a Placement
with no providers or allocations left from earlier tests. Every process a
test starts is stopped by pid, even when the test fails.

With CI=true, a missing service fails the run; it never skips.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import COMPUTE, Pki, compute_name
from etcd_compute.placement import PlacementClient
from tests.support import REPO, Run, run_cli, running, unavailable, wait_for  # noqa: F401
from tools.local_services import (
    EtcdServer,
    GlanceServer,
    KeystoneServer,
    PlacementServer,
    cloud,
    pid_alive,
    stop_pid,
    stop_pids,
)


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (a CI timeout, kill) unwinds like Ctrl-C, so fixtures still stop
    # every process they started.
    def interrupt(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


# ---------------------------------------------------------------- parallel runs

# `make test` runs the functional tests on several pytest-xdist workers (`--dist
# loadgroup`). Each worker starts its own session etcd, Placement and CA (random ports,
# temporary dirs). A test that uses one of these fixtures runs on the one worker that holds
# it, because it owns a fixed name of this machine or is too dear to start once per worker:
WORKER_GROUPS = {
    # 169.254.169.254:80, the libvirt network etcd-compute-test and its nwfilters, under
    # host_lock("guests") for the session; the machine's libvirtd, started if not running.
    # Guests on hypervisor hosts of their own (tests/virt/hypervisors.py: moves, fencing,
    # host failure, the lifecycle) hold no fixed name and run on any worker beside it.
    "vm_config": "guests",
    "system_libvirt": "guests",
    # A 3-member etcd cluster and Placement on a bridge, per package.
    "etcd_cluster": "cluster",
    # Four more installations (CA, etcd, Placement each).
    "zone_services": "zones",
    # The site's uplink (tests/network/test_reach_from_outside_vm.py): a Neutron stack, two
    # hypervisor hosts and real guests of its own, no fixed name; a group of its own (before
    # cloud's: its worker starts its own Keystone), so that its module's stack is started
    # once, on one worker, beside the other network tests.
    "outside": "outside",
    # Projects kept apart on Neutron (tests/network/test_projects_apart_vm.py): five real
    # guests, a Neutron stack and a compute API of its own: a worker of its own.
    "projects_apart": "projects-apart",
    # Tempest's smoke scenario tests (tests/network/test_tempest_scenario_smoke_vm.py):
    # tools/tempest_run's scenario cloud of its own, real guests one after another: 4.3
    # minutes alone at load average 6-10 (the cloud ready in 42 s).
    "tempest_scenario": "tempest-scenario",
    # Real guests on Neutron ports on two OVN hypervisor hosts (the probe beside them, or
    # the compute API over them: tests/network/guests.py, compute_cloud.py), the browser's
    # dashboard among them: the network tests' longer half, on a worker of its own.
    "prober": "network-guests",
    "compute_cloud": "network-guests",
    # A Neutron stack on OVN per module (tests/network/conftest.py and the API's module on
    # Neutron): the network tests, their real guests included, on a worker of their own
    # beside cloud's (its own Keystone and Glance): on cloud's worker they made it the run's
    # longest by minutes. (One stack per worker for all of them left each module the
    # previous ones' networks, and Neutron's notifier the previous compute API: since
    # then every compute API of a Keystone listens on one port, KeystoneServer.service_port.)
    "network": "network",
    # Keystone and Glance (session, started on first use): tests of theirs that boot real
    # guests on the machine's libvirt are in "guests" above (the first group named wins),
    # whose worker starts its own; the API walk-through boots its guest on a hypervisor
    # host of its own (no fixed name) and is here.
    "openstack_cloud": "cloud",
    # PostgreSQL and a 4-worker Placement (per module).
    "pg_placement": "postgres",
}
# The groups in the order workers take them up: the longest first, so the run does not
# wait on one started last. Measured serially in one loaded run (load average 25-35), before
# the walk-through (330 s there) left guests for cloud: guests 793 s, cloud 386, cluster 209,
# zones 194, postgres 50; so now guests and cloud are about equal.
# outside: 225 s alone (its Neutron stack, two hosts, three guests one after another); 432 s
# with a fourth guest booted through a compute API of its own (the spoofing test), alone
# on a machine at load average ~15.
# network and network-guests: the Neutron modules, split out of cloud's, whose worker ran 9
# of them one after another (1102 s alone on a loaded machine, load average 10-14), before
# the dashboard's browser test and Ansible's runs joined them.
GROUP_ORDER = ["guests", "network-guests", "network", "cloud", "projects-apart",
               "tempest-scenario", "outside", "cluster", "zones", "postgres"]
# Groups that take a whole module when one of its tests is theirs: its module-scoped hosts
# and Neutron stack are then started on one worker only.
WHOLE_MODULE_GROUPS = {"network-guests"}
GROUP = pytest.StashKey[str | None]()


def fixtures_group(item: pytest.Item) -> str | None:
    return next((group for fixture, group in WORKER_GROUPS.items()
                 if fixture in getattr(item, "fixturenames", ())), None)


def worker_group(item: pytest.Item) -> str | None:
    """The group collection gave the test (`pytest_collection_modifyitems`)."""
    return item.stash[GROUP] if GROUP in item.stash else fixtures_group(item)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    whole = {item.nodeid.split("::")[0]: group for item in items
             if (group := fixtures_group(item)) in WHOLE_MODULE_GROUPS}
    for item in items:
        item.stash[GROUP] = whole.get(item.nodeid.split("::")[0]) or fixtures_group(item)
        group = worker_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if item.get_closest_marker("vm") and not item.get_closest_marker("flaky"):
            # TCG guests on two shared cores: a boot, a DHCP lease or a move's bound can
            # miss its time when other workers' guests load the machine; one more try
            # (listed as a rerun in the summary). A failure twice in a row fails the run.
            item.add_marker(pytest.mark.flaky(reruns=1))
    if hasattr(config, "workerinput"):
        # Every worker sorts alike (xdist checks that they collected the same list).
        # Longest first: the groups, then the real guests' tests (each tens of seconds), then
        # the rest, which fill the workers' tails evenly instead of four guests' tests
        # booting side by side at the end.
        rank = {group: n for n, group in enumerate(GROUP_ORDER)}
        items.sort(key=lambda item: (rank.get(worker_group(item) or "", len(rank)),
                                     item.get_closest_marker("vm") is None))


UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # after xdist named the groups in the node ids
def pytest_collection_finish(session: pytest.Session) -> None:
    """Groups that xdist silently ignored would run their tests on several workers at once
    (with pytest 9.2 and xdist 3.8 it does: pytest-xdist#1386): those tests fail instead."""
    if not (hasattr(session.config, "workerinput") and session.config.getvalue("loadgroup")):
        return
    for item in session.items:
        group = worker_group(item)
        if group and not item.nodeid.endswith(f"@{group}"):
            item.stash[UNGROUPED] = group


@pytest.hookimpl(tryfirst=True)  # before any fixture is set up
def pytest_runtest_setup(item: pytest.Item) -> None:
    if UNGROUPED in item.stash:
        pytest.fail(f"--dist loadgroup ignored this test's xdist_group {item.stash[UNGROUPED]} "
                    "(pytest-xdist#1386?): it could share its fixed names with another worker",
                    pytrace=False)


# --------------------------------------------------------------------- services

# The operator's certificate and etcd user (schedule.py, the tests' own clients).
OPERATOR_USER = "operator"


@pytest.fixture(scope="session")
def cluster_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The cluster CA the session's etcd and Placement trust (secure by default)."""
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.init("etcd-compute-tests")
    return pki


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory,
                cluster_pki: Pki) -> Iterator[EtcdServer]:
    """etcd over TLS with client certificates and RBAC on (root, the operator role)."""
    if shutil.which("etcd") is None:
        unavailable("etcd is not installed (make install)")
    with secured_etcd(tmp_path_factory.mktemp("etcd"), cluster_pki) as server:
        yield server


@contextlib.contextmanager
def secured_etcd(run_dir: Path, pki: Pki) -> Iterator[EtcdServer]:
    """An etcd as the session's (TLS, client certificates, RBAC with root and the operator
    role), stopped by pid at the end even when its start fails half-way: the session's, and
    a test's own (one it stops, restarts or cuts) in its place."""
    server = EtcdServer.create(run_dir, pki=pki)
    with running(server, lambda: server.start().enable_auth([OPERATOR_USER])):
        yield server


@pytest.fixture(scope="session")
def placement_server(tmp_path_factory: pytest.TempPathFactory,
                     cluster_pki: Pki) -> Iterator[PlacementServer]:
    """Placement over TLS, refusing clients without a cluster certificate."""
    with running(PlacementServer.create(tmp_path_factory.mktemp("placement"),
                                        pki=cluster_pki)) as server:
        yield server


@pytest.fixture(scope="session")
def openstack_cloud(tmp_path_factory: pytest.TempPathFactory, cluster_pki: Pki,
                    placement_server: PlacementServer
                    ) -> Iterator[tuple[KeystoneServer, GlanceServer]]:
    """Keystone and Glance over TLS (the cluster CA), started side by side on first use:
    projects admin, service, demo, alt; users admin, glance, etcd-compute, demo, alt; the
    catalog's identity, image and placement services."""
    try:
        keystone, glance = cloud.start(tmp_path_factory.mktemp("cloud"), cluster_pki,
                                       placement_server.endpoint)
    except ServiceUnavailable as exc:
        unavailable(str(exc))
    yield keystone, glance
    glance.stop()
    keystone.stop()


@pytest.fixture(scope="session")
def keystone_server(openstack_cloud: tuple[KeystoneServer, GlanceServer]) -> KeystoneServer:
    return openstack_cloud[0]


@pytest.fixture(scope="session")
def glance_server(openstack_cloud: tuple[KeystoneServer, GlanceServer]) -> GlanceServer:
    return openstack_cloud[1]


@pytest.fixture
def glance_config(openstack_cloud: tuple[KeystoneServer, GlanceServer]) -> dict[str, Any]:
    """The `glance` config section of the `etcd-compute` service user."""
    return cloud.glance_config(*openstack_cloud)


@pytest.fixture(scope="session")
def project_ids(keystone_server: KeystoneServer) -> dict[str, str]:
    """Keystone's project ids by name (admin, service, demo, alt)."""
    session = keystone_server.session()
    projects = session.get(keystone_server.auth_url + "/projects").json()["projects"]
    return {project["name"]: project["id"] for project in projects}


@pytest.fixture
def glance_images(glance_config: dict[str, Any]) -> Iterator[Any]:
    """Upload images as the service user (`upload(path, name, owner=..., **fields)`);
    every image uploaded here is deleted after the test."""
    from etcd_compute.glance import GlanceClient

    client = GlanceClient(glance_config)
    made: list[str] = []

    def upload(path: Path, name: str, **fields: Any) -> dict[str, Any]:
        image = client.create(name, fields.pop("disk_format", "qcow2"),
                              fields.pop("container_format", "bare"), **fields)
        made.append(image["id"])
        with open(path, "rb") as handle:
            client.upload(image["id"], handle, size=path.stat().st_size)
        return client.get(image["id"])

    upload.client = client  # type: ignore[attr-defined]
    yield upload
    for image_id in made:
        try:
            client.delete(image_id)
        except Exception:  # noqa: BLE001 (gone already, or killed by Glance)
            pass


@pytest.fixture
def etcd_prefix() -> str:
    return f"/test-{uuidlib.uuid4().hex[:12]}"


@pytest.fixture
def etcd_config(etcd_server: EtcdServer, etcd_prefix: str) -> dict[str, Any]:
    """The operator's view of etcd (what schedule.py and the tests' own client use)."""
    return etcd_server.client_config(etcd_prefix, OPERATOR_USER)


@pytest.fixture
def placement_config(placement_server: PlacementServer) -> dict[str, Any]:
    return placement_server.client_config(OPERATOR_USER)


@pytest.fixture
def host_credentials(etcd_server: EtcdServer, placement_server: PlacementServer,
                     cluster_pki: Pki, etcd_prefix: str) -> Callable[[str], dict[str, Any]]:
    """`etcd` and `placement` config sections for the compute host `rp_uuid`: its own
    certificate (CN compute-<rp_uuid>) and etcd role, as `cluster.py host add` makes them."""

    def credentials(rp_uuid: str) -> dict[str, Any]:
        issued = cluster_pki.issue(compute_name(rp_uuid), COMPUTE)
        with Store(etcd_server.client_config(etcd_prefix, ROOT)) as root:
            EtcdAuth(root).add_host(rp_uuid)
        tls = {"ca_cert": str(cluster_pki.ca_cert), "cert": str(issued.cert),
               "key": str(issued.key)}
        return {"etcd": {**etcd_server.client_config(etcd_prefix), **tls},
                "placement": {**placement_server.client_config(), **tls}}

    return credentials


@pytest.fixture
def store(etcd_config: dict[str, Any]) -> Iterator[Store]:
    store = Store(etcd_config)
    yield store
    store.client.delete_prefix(etcd_config["prefix"] + "/")
    store.close()


def wipe_placement(client: PlacementClient) -> None:
    """Remove every allocation and provider: each test starts from an empty Placement."""
    for provider in client.list_providers():
        allocations = client.get(f"/resource_providers/{provider['uuid']}/allocations")
        for consumer in allocations["allocations"]:
            client.delete_allocations(consumer)
    for provider in client.list_providers():
        client.delete_provider(provider["uuid"])


@pytest.fixture
def placement(placement_config: dict[str, Any]) -> Iterator[PlacementClient]:
    client = PlacementClient(placement_config)
    wipe_placement(client)
    yield client


# ---------------------------------------------------------------- configuration


@pytest.fixture
def compute_config(tmp_path: Path, host_credentials: Callable[[str], dict[str, Any]]
                   ) -> dict[str, Any]:
    """A fake-driver compute with a small fixed inventory and a short heartbeat, holding
    its own host certificate (see `host_config` for more hosts)."""
    rp_uuid = str(uuidlib.uuid4())
    state = tmp_path / "compute-state"
    overrides = {
        **host_credentials(rp_uuid),
        "logging": {"level": "DEBUG"},
        "compute": {
            "uuid": rp_uuid,
            "name": f"host-{uuidlib.uuid4().hex[:8]}",
            "state_dir": str(state),
            "instances_dir": str(state / "instances"),
            "heartbeat_ttl": 3,
            "fence_margin_seconds": 1,
            "workers": 2,
            "job_timeout_seconds": 30,
            "shutdown_timeout_seconds": 10,
            "inventory": {
                "VCPU": {"total": 4, "reserved": 0, "allocation_ratio": 1.0},
                "MEMORY_MB": {"total": 2048, "reserved": 0, "allocation_ratio": 1.0},
                "DISK_GB": {"total": 20, "reserved": 0, "allocation_ratio": 1.0},
            },
        },
        "driver": {"name": "fake"},
    }
    config = configuration.deep_merge(defaults.COMPUTE_DEFAULTS, overrides)
    configuration.validate(config, "compute_config", "test compute config")
    return config


@pytest.fixture
def host_config(tmp_path: Path, compute_config: dict[str, Any],
                host_credentials: Callable[[str], dict[str, Any]]
                ) -> Callable[..., dict[str, Any]]:
    """Another compute host like `compute_config`: its own uuid, name, state and certificate."""

    def another(name: str, **overrides: Any) -> dict[str, Any]:
        rp_uuid = str(uuidlib.uuid4())
        state = tmp_path / f"{name}-state"
        config = configuration.deep_merge(compute_config, {
            **host_credentials(rp_uuid),
            "compute": {"uuid": rp_uuid, "name": name, "state_dir": str(state),
                        "instances_dir": str(state / "instances")}})
        return configuration.deep_merge(config, overrides)

    return another


@pytest.fixture
def fake_hosts_config(compute_config: dict[str, Any], etcd_config: dict[str, Any],
                      placement_config: dict[str, Any]) -> dict[str, Any]:
    """For `compute.py --fake-hosts N`: one process acts for N hosts, so it needs the
    operator's credentials rather than one host's (benchmarks and CLI tests only)."""
    return configuration.deep_merge(compute_config, {"etcd": etcd_config,
                                                     "placement": placement_config})


@pytest.fixture
def schedule_config(etcd_config: dict[str, Any],
                    placement_config: dict[str, Any]) -> dict[str, Any]:
    overrides = {
        "etcd": etcd_config,
        "placement": placement_config,
        # The test etcd runs with --max-txn-ops 4096 (tools/local_services.py).
        "scheduler": {"default_image": "file:///dev/null", "etcd_max_txn_ops": 4096},
    }
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, overrides)
    configuration.validate(config, "schedule_config", "test schedule config")
    return config


@pytest.fixture
def schedule_yaml(schedule_config: dict[str, Any],
                  write_yaml: Callable[[str, dict[str, Any]], Path]) -> Path:
    return write_yaml("schedule.yaml", schedule_config)


@pytest.fixture
def run_schedule(schedule_yaml: Path) -> Callable[..., Run]:
    """Run the real schedule.py with the test's schedule.yaml."""

    def run(*args: str, config: Path | None = None, timeout: float = 60) -> Run:
        return run_cli("schedule.py", "--config", str(config or schedule_yaml), *args,
                       timeout=timeout)

    return run


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[[str, dict[str, Any]], Path]:
    def write(name: str, data: dict[str, Any]) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data))
        return path

    return write


# -------------------------------------------------------------------- processes


class DaemonProcess:
    """compute.py or `schedule.py serve` as a real child process, stopped by pid."""

    def __init__(self, argv: list[str], log_path: Path):
        self.argv, self.log_path = argv, log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, *self.argv],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
            start_new_session=True,
        )
        log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill9(self) -> None:
        """SIGKILL the daemon and its whole process group (workers included)."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(10)

    def terminate(self, timeout: float = 30) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.alive():
            stop_pid(self.process.pid, timeout=15)
        # Workers are in the daemon's process group; leave none behind.
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if pid_alive(self.process.pid):
            self.process.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def stop_daemons(daemons: Iterable[DaemonProcess]) -> None:
    """Every one stopped, side by side (a compute with guests takes a second to shut down)."""
    daemons = list(daemons)
    stop_pids([d.process.pid for d in daemons if d.process is not None and d.alive()],
              timeout=15)
    for daemon in daemons:
        daemon.stop()  # what is left: its process group, its exit status


ComputeProcess = DaemonProcess


@pytest.fixture
def start_compute(tmp_path: Path, write_yaml: Callable[..., Path]) -> Iterator[
        Callable[..., DaemonProcess]]:
    """Start compute.py processes with a config dict; all are stopped after the test."""
    started: list[DaemonProcess] = []

    def start(config: dict[str, Any], *extra_args: str, name: str = "compute") -> DaemonProcess:
        path = write_yaml(f"{name}-{len(started)}.yaml", config)
        process = DaemonProcess([str(REPO / "compute.py"), "--config", str(path),
                                 *extra_args], tmp_path / f"{name}.log").start()
        started.append(process)
        return process

    yield start
    stop_daemons(started)


@pytest.fixture
def start_controller(tmp_path: Path, write_yaml: Callable[..., Path],
                     schedule_config: dict[str, Any]) -> Iterator[Callable[..., DaemonProcess]]:
    """Start `schedule.py serve` processes (the test's schedule config unless given)."""
    started: list[DaemonProcess] = []

    def start(config: dict[str, Any] | None = None, name: str = "controller") -> DaemonProcess:
        path = write_yaml(f"{name}-{len(started)}.yaml", config or schedule_config)
        process = DaemonProcess([str(REPO / "schedule.py"), "--config", str(path), "serve"],
                                tmp_path / f"{name}-{len(started)}.log").start()
        started.append(process)
        return process

    yield start
    stop_daemons(started)


# ---------------------------------------------------------------------- libvirt


@pytest.fixture
def libvirt_test_conn() -> Iterator[Any]:
    """libvirt's test:///default driver: fast, in-process, no VMs."""
    try:
        import libvirt
    except ImportError:
        unavailable("libvirt-python is not installed (make install)")
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()
