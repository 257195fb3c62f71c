"""`make up` / `make down` / `make status`: everything local, and a state file of what we made.

Secure by default: the first `make up` creates a cluster CA and certificates
under run/pki, starts etcd with TLS, client certificates and RBAC (root, the
operator role, an `operator` user) and Placement with TLS that requires a
cluster certificate, and writes run/schedule.yaml (the operator's) and
run/compute.yaml (a host named `local`, with its own certificate and etcd
role). `make up PLAIN=1` does the same over plain TCP, for quick experiments.

It also starts Keystone and Glance (TLS with certificates of the same CA, loopback),
bootstraps the cloud's projects, users and catalog (`cloud.py`), uploads the offline test
guest as the public image `etcd-compute-test-guest`, gives schedule.yaml and compute.yaml
the `glance` section of the `etcd-compute` service user, and writes run/clouds.yaml
(clouds `etcd-compute`, `etcd-compute-demo`, `etcd-compute-alt`) for the `openstack`
command line and openstacksdk. Then the compute API (`schedule.py api`, TLS, loopback,
its config run/compute-api.yaml: the operator's sections and `api` with the
`etcd-compute` service user validating tokens), in the catalog as `compute`, with
Nova's usual flavors (m1.nano ... m1.large). Then, unless plain, Horizon (the dashboard,
tools/local_services/horizon.py: TLS, loopback, https://127.0.0.1:8443/), whose URL and
logins it prints.

The guests' network (`network_backend`): `neutron` by default, every guest on a Neutron
port: `site_network.py`'s process starts Neutron on OVN (MariaDB, OVN's databases, ovn-northd),
one hypervisor host "local" in a network namespace (an OVN chassis with its own Open
vSwitch, ovn-controller, a private libvirtd, Neutron's OVN metadata agent and our metadata
API), the namespace "outside" (the user's laptop) on the site's uplink and the external
network `public` there; run/compute.yaml is that host's, and run/outside runs a command in
the outside namespace (`run/outside ssh ...`). `libvirt` (`make up NETWORK=libvirt`): the
seed's shape, the machine's libvirtd and its NAT network `etcd-compute`, for schedule.py
alone.

Whatever `make up` or `make demo KEEP=1` starts or creates is recorded in
run/services.json: services and daemons (stopped by pid), the demo's
providers, libvirt network, nwfilters, metadata server and files. `make down`
removes all of it, and the run directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import COMPUTE, Pki, compute_name
from tools.local_services import cloud
from tools.local_services.etcd import MAX_TXN_OPS, EtcdServer
from tools.local_services.glance import GlanceServer
from tools.local_services.keystone import KeystoneServer
from tools.local_services.libvirt import ensure_libvirtd
from tools.local_services.placement import PlacementServer
from tools.local_services.process import REPO, pid_alive, port_open, stop_pid, wait_until

OPERATOR = "operator"
NEUTRON, LIBVIRT = "neutron", "libvirt"
HOST = "local"  # the hand-run compute's name (and its chassis' on neutron)
# Starting Neutron, OVN and the host took 30-60 s here; removing them ~10 s.
SITE_START_TIMEOUT = 300
SITE_STOP_TIMEOUT = 120
# Where a hand-run compute (run/compute.yaml) keeps disks: qemu must traverse to them.
LOCAL_VM_FILES = Path("/var/tmp/etcd-compute-local")

Say = Callable[[str], None]


@dataclass
class LocalStack:
    run_dir: Path
    plain: bool = False
    etcd: dict | None = None
    placement: dict | None = None
    keystone: dict | None = None
    glance: dict | None = None
    compute_api: dict | None = None
    console_proxy: dict | None = None
    # The console proxy's port (`up`'s; the running proxy's when there is one).
    console_port: int = 6080
    horizon: dict | None = None
    # virtlogd and libvirtd, when we started them.
    libvirt_pids: list[int] = field(default_factory=list)
    # Daemons started for us (the demo's computes with KEEP=1): name, pid, log.
    daemons: list[dict] = field(default_factory=list)
    # Libvirt pieces made for guests: uri, network, mdserver compute config, directories.
    guests: list[dict] = field(default_factory=list)
    # Resource providers of hosts that existed only for us.
    providers: list[str] = field(default_factory=list)
    # The guests' network: `neutron` (site_network.py's process, `site`) or `libvirt`.
    network_backend: str = NEUTRON
    site: dict | None = None

    FIELDS = ("plain", "etcd", "placement", "keystone", "glance", "compute_api",
              "console_proxy", "horizon", "libvirt_pids", "daemons", "guests", "providers",
              "network_backend", "site")
    # The services make up starts, in order (make down stops them in reverse).
    SERVICES = ("etcd", "placement", "keystone", "glance", "compute_api", "console_proxy",
                "horizon")

    @property
    def state_file(self) -> Path:
        return self.run_dir / "services.json"

    @property
    def pki(self) -> Pki:
        return Pki(self.run_dir / "pki")

    @classmethod
    def load(cls, run_dir: Path) -> LocalStack:
        stack = cls(run_dir)
        if stack.state_file.exists():
            saved = json.loads(stack.state_file.read_text())
            for name in cls.FIELDS:
                if name in saved:
                    setattr(stack, name, saved[name])
        return stack

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = {name: getattr(self, name) for name in self.FIELDS}
        self.state_file.write_text(json.dumps(state, indent=2))

    # --- up -----------------------------------------------------------------------------

    def up(self, etcd_port: int, placement_port: int, say: Say, plain: bool = False,
           keystone_port: int = 5000, glance_port: int = 9292, api_port: int = 8774,
           guests: bool = True, console_port: int = 6080,
           dashboard_port: int | None = None, network_backend: str = NEUTRON,
           neutron_workers: int | None = None) -> None:
        """Start what is not running. `guests=False` (`make tempest`: fake-driver hosts only)
        leaves libvirt, the network, the test guest and the hand-run host's configs alone.
        Horizon only with a `dashboard_port` and TLS. `neutron_workers`: Neutron's API
        workers (None: one per core, at most 4)."""
        running = bool(self.etcd and pid_alive(self.etcd["pid"]))
        if running and self.plain != plain:
            raise ServiceUnavailable(
                f"the local services run {'plain' if self.plain else 'with TLS'}; "
                "make down first to switch")
        if running and guests and self.network_backend != network_backend:
            raise ServiceUnavailable(
                f"the local services run on network backend {self.network_backend}; "
                "make down first to switch")
        self.plain = plain
        self.network_backend = network_backend
        self.console_port = console_port
        pki = None if plain else self.pki
        if pki is not None and pki.init("etcd-compute-local"):
            say(f"created the cluster CA in {pki.directory}")
        if running:
            say(f"etcd already running (pid {self.etcd['pid']}, port {self.etcd['port']})")
        else:
            if port_open(etcd_port):
                raise ServiceUnavailable(
                    f"port {etcd_port} is taken by another process; stop it or pass --etcd-port")
            etcd = EtcdServer.create(self.run_dir, etcd_port, pki=pki)
            etcd.start()
            if pki is not None:
                etcd.enable_auth([OPERATOR])
            self.etcd = {"pid": etcd.pid, "port": etcd.port}
            self.save()
            say(f"etcd started (pid {etcd.pid}, {etcd.scheme}://{etcd.endpoint}"
                f"{', client certificates and RBAC' if pki else ', plain'})")
        if self.placement and pid_alive(self.placement["pid"]):
            say(f"Placement already running (pid {self.placement['pid']}, "
                f"port {self.placement['port']})")
        else:
            if port_open(placement_port):
                raise ServiceUnavailable(f"port {placement_port} is taken by another process; "
                                         "stop it or pass --placement-port")
            placement = PlacementServer.create(self.run_dir, placement_port, pki=pki)
            placement.start()
            self.placement = {"pid": placement.pid, "port": placement.port}
            self.save()
            say(f"Placement started (pid {placement.pid}, {placement.endpoint}, SQLite)")
        self._up_cloud(keystone_port, glance_port, say, test_guest=guests)
        if not guests:
            self.write_schedule_config(say)
        elif self.network_backend == NEUTRON:
            self._up_site(say, neutron_workers)
        elif any(pid_alive(pid) for pid in self.libvirt_pids):
            say(f"libvirtd already running (pids {self.libvirt_pids})")
        else:
            try:
                self.libvirt_pids = ensure_libvirtd(self.run_dir)
            except ServiceUnavailable as exc:
                say(f"libvirtd not available ({exc}); the fake driver still works")
            else:
                say("libvirtd started" if self.libvirt_pids else "libvirtd already running")
            self.save()
        if guests:
            self.write_configs(say)
        self._up_api(api_port, say)
        self._up_console_proxy(say)
        if dashboard_port:
            self._up_dashboard(dashboard_port, say)
        if guests and self.network_backend == NEUTRON:
            self._say_outside(say)

    # --- the network on Neutron (site_network.py) ----------------------------------------

    @property
    def site_file(self) -> Path:
        from tools.local_services.site_network import SITE_FILE

        return self.run_dir / "network" / SITE_FILE

    def site_info(self) -> dict[str, Any] | None:
        """What site_network.py wrote once it was up (None: not running)."""
        if not (self.site and pid_alive(self.site["pid"]) and self.site_file.exists()):
            return None
        return dict(json.loads(self.site_file.read_text()))

    def _up_site(self, say: Say, neutron_workers: int | None = None) -> None:
        """site_network.py's process: Neutron on OVN, the host, the outside, `public`."""
        import os
        import sys

        if self.site_info() is not None:
            say(f"Neutron, OVN and host {HOST} already running (pid {self.site['pid']})")
            return
        log = self.run_dir / "network.log"
        LOCAL_VM_FILES.mkdir(parents=True, exist_ok=True)
        LOCAL_VM_FILES.chmod(0o711)
        image_dir = Path.home() / ".cache" / "etcd-compute"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tools.local_services.site_network", "--run-dir",
                 str(self.run_dir), "--host", HOST, "--vm-root", str(LOCAL_VM_FILES),
                 "--image-dir", str(image_dir),
                 *(["--neutron-workers", str(neutron_workers)] if neutron_workers else [])],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
        self.site = {"pid": process.pid, "log": str(log)}
        self.save()

        def ready() -> bool:
            if process.poll() is not None:
                tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
                raise ServiceUnavailable(f"the network (Neutron, OVN, host {HOST}) did not "
                                         f"start; see {log} ({tail[0][:200]})")
            return self.site_file.exists()

        wait_until(ready, SITE_START_TIMEOUT, "the network (Neutron, OVN, the host)")
        info = self.site_info() or {}
        took = ", ".join(f"{name} {value} s" for name, value in info["timings"].items())
        say(f"Neutron on OVN started (pid {process.pid}, {info['neutron']}, MariaDB; {took}; "
            f"log {log})")
        say(f"hypervisor host {HOST}: namespace {info['hosts'][HOST]['netns']}, an OVN "
            "chassis with its own Open vSwitch, ovn-controller, libvirtd and metadata agent")
        outside = info["outside"]
        say(f"external network public: {outside['cidr']} (floating IPs {outside['pool'][0]}"
            f"-{outside['pool'][1]}); outside namespace {outside['netns']} at "
            f"{outside['address']}")
        helper = self.run_dir / "outside"
        helper.write_text("#!/bin/sh\n# Runs a command in the outside namespace (the user's "
                          "laptop on the external network).\n"
                          f"exec ip netns exec {outside['netns']} \"$@\"\n")
        helper.chmod(0o755)

    def _say_outside(self, say: Say) -> None:
        info = self.site_info()
        if info is None:
            return
        say(f"from outside: run/outside COMMAND (ip netns exec {info['outside']['netns']} "
            "COMMAND), e.g. run/outside ssh -i KEY root@FLOATING_IP")

    def network_section(self) -> dict[str, Any] | None:
        """The computes' and the API's `network` section (None: the libvirt backend's
        default)."""
        info = self.site_info()
        return None if info is None else dict(info["hosts"][HOST]["config"]["network"])

    def api_config(self) -> dict[str, Any]:
        """The compute API's config: the operator's sections, and `api` with the
        `etcd-compute` service user validating the callers' tokens."""
        authtoken = {**cloud.service_credentials(self._keystone()), "auth_type": "password"}
        if not self.plain:
            authtoken["cafile"] = str(self.pki.ca_cert)
        config = {**self.operator_config(), "scheduler": self.scheduler_section(),
                  "api": {"keystone_authtoken": authtoken}}
        network = self.network_section()
        if network is not None:
            config["network"] = network
        return config

    @staticmethod
    def scheduler_section() -> dict[str, Any]:
        """What the local etcd lets one transaction hold (its --max-txn-ops): without it
        the scheduler assumes etcd's default 128 and caps --count at 42."""
        return {"etcd_max_txn_ops": MAX_TXN_OPS}

    def _up_api(self, api_port: int, say: Say) -> None:
        """`schedule.py api` on `api_port`, in the catalog as `compute`; the usual flavors."""
        from tools.local_services.compute_api import ComputeApiServer, seed_flavors

        api = ComputeApiServer.create(self.run_dir, api_port,
                                      pki=None if self.plain else self.pki)
        if self.compute_api and pid_alive(self.compute_api["pid"]):
            say(f"compute API already running (pid {self.compute_api['pid']}, "
                f"{api.endpoint})")
        else:
            if port_open(api_port):
                raise ServiceUnavailable(f"port {api_port} is taken by another process; stop "
                                         "it or pass --api-port")
            api.start(self.api_config())
            self.compute_api = {"pid": api.pid, "port": api.port}
            self.save()
            say(f"compute API started (pid {api.pid}, {api.endpoint}, config "
                f"{api.config_path})")
        self._keystone().add_service("compute", "nova", api.endpoint)
        with Store(self.operator_config()["etcd"]) as store:
            made = seed_flavors(store)
        say(f"flavors: {', '.join(made) if made else 'already there'} (openstack flavor list)")

    def _up_console_proxy(self, say: Say) -> None:
        """`schedule.py console-proxy` beside the API (not with PLAIN=1: the hosts' relays
        speak mutual TLS only)."""
        from tools.local_services.console_proxy import ConsoleProxyServer

        if self.plain:
            say("console proxy: not started with PLAIN=1 (hosts' console relays need TLS)")
            return
        proxy = ConsoleProxyServer.create(self.run_dir, self.console_port)
        if self.console_proxy and pid_alive(self.console_proxy["pid"]):
            say(f"console proxy already running (pid {self.console_proxy['pid']}, "
                f"{proxy.url})")
            return
        if port_open(self.console_port):
            raise ServiceUnavailable(f"port {self.console_port} is taken by another process; "
                                     "stop it or pass --console-port")
        proxy.start(self.operator_config())
        self.console_proxy = {"pid": proxy.pid, "port": proxy.port}
        self.save()
        say(f"console proxy started (pid {proxy.pid}, noVNC at {proxy.url}; a server's "
            "console: openstack console url show SERVER)")

    def _up_dashboard(self, port: int, say: Say) -> None:
        """Horizon on `port` (TLS only: plain, none), its URL and the logins said."""
        from tools.local_services.horizon import HorizonServer

        if self.plain:
            say("Horizon not started (plain: it is served with TLS only)")
            return
        horizon = HorizonServer.create(self.run_dir / "horizon", port, pki=self.pki)
        if self.horizon and pid_alive(self.horizon["pid"]):
            say(f"Horizon already running (pid {self.horizon['pid']})")
        else:
            if port_open(port):
                raise ServiceUnavailable(f"port {port} is taken by another process; stop it "
                                         "or pass --dashboard-port")
            keystone = self._keystone()
            horizon.start(keystone.auth_url, keystone.ca_file)
            self.horizon = {"pid": horizon.pid, "port": horizon.port}
            self.save()
            say(f"Horizon started (pid {horizon.pid}, log {horizon.log_path})")
        keystone = self._keystone()
        say(f"dashboard: {horizon.url} (certificate of the cluster CA {self.pki.ca_cert}); "
            f"log in as demo / {keystone.password('demo')} or admin / "
            f"{keystone.admin_password} (domain Default)")

    def _up_cloud(self, keystone_port: int, glance_port: int, say: Say,
                  test_guest: bool = True) -> None:
        """Keystone and Glance (side by side), the cloud's identities, the test guest image
        (unless not `test_guest`), run/clouds.yaml."""
        if self.keystone and pid_alive(self.keystone["pid"]) and self.glance and \
                pid_alive(self.glance["pid"]):
            say(f"Keystone already running (pid {self.keystone['pid']}, "
                f"port {self.keystone['port']})")
            say(f"Glance already running (pid {self.glance['pid']}, port {self.glance['port']})")
        else:
            for name in ("glance", "keystone"):  # one without the other: start both again
                state = getattr(self, name)
                if state and pid_alive(state["pid"]):
                    stop_pid(state["pid"])
            for port, option in ((keystone_port, "keystone"), (glance_port, "glance")):
                if port_open(port):
                    raise ServiceUnavailable(f"port {port} is taken by another process; stop "
                                             f"it or pass --{option}-port")
            keystone, glance = cloud.start(self.run_dir, None if self.plain else self.pki,
                                           self._placement().endpoint, keystone_port,
                                           glance_port)
            self.keystone = {"pid": keystone.pid, "port": keystone.port}
            self.glance = {"pid": glance.pid, "port": glance.port}
            self.save()
            say(f"Keystone started (pid {keystone.pid}, {keystone.auth_url}, SQLite; projects "
                f"{', '.join(cloud.PROJECTS)})")
            say(f"Glance started (pid {glance.pid}, {glance.endpoint}, file store "
                f"{glance.store_dir}, SQLite)")
        keystone = self._keystone()
        clouds = cloud.write_clouds_yaml(keystone, self.run_dir / "clouds.yaml")
        say(f"clouds: {clouds} (etcd-compute: admin; etcd-compute-demo: demo; "
            "etcd-compute-alt: alt)")
        guest = build_test_guest(say) if test_guest else None
        if guest is not None:
            from etcd_compute.glance import GlanceClient

            image, uploaded = cloud.upload_test_guest(GlanceClient(self.glance_config()), guest)
            say(f"image {image['name']} {'uploaded' if uploaded else 'already in Glance'} "
                f"({image['id']}, {image['disk_format']}, {image['size']} bytes, public)")

    def _keystone(self) -> KeystoneServer:
        assert self.keystone is not None
        return KeystoneServer.create(self.run_dir / "keystone", self.keystone["port"],
                                     pki=None if self.plain else self.pki)

    def _glance(self) -> GlanceServer:
        assert self.glance is not None
        return GlanceServer.create(self.run_dir / "glance", self._keystone(),
                                   self.glance["port"], pki=None if self.plain else self.pki)

    def glance_config(self) -> dict[str, Any]:
        """The `glance` section of the `etcd-compute` service user."""
        return cloud.glance_config(self._keystone(), self._glance())

    def _etcd(self) -> EtcdServer:
        assert self.etcd is not None
        return EtcdServer.create(self.run_dir, self.etcd["port"],
                                 pki=None if self.plain else self.pki)

    def _placement(self) -> PlacementServer:
        assert self.placement is not None
        return PlacementServer.create(self.run_dir, self.placement["port"],
                                      pki=None if self.plain else self.pki)

    def operator_config(self) -> dict[str, Any]:
        """`etcd` and `placement` sections for the operator (schedule.py, the controller)."""
        config = {"etcd": self._etcd().client_config("", None if self.plain else OPERATOR),
                  "placement": self._placement().client_config(OPERATOR)}
        if self.glance:
            config["glance"] = self.glance_config()
        if not self.plain:  # remote consoles: URLs on the proxy, its certificate to relays
            from tools.local_services.console_proxy import operator_section

            port = (self.console_proxy or {}).get("port", self.console_port)
            config["console"] = operator_section(self.pki, port)
        return config

    def host_config(self, rp_uuid: str) -> dict[str, Any]:
        """`etcd` and `placement` sections for the compute host `rp_uuid`: its certificate
        (CN compute-<uuid>) and etcd role, as `cluster.py host add` makes them."""
        if self.plain:
            return self.operator_config()
        issued = self.pki.issue(compute_name(rp_uuid), COMPUTE)
        with Store(self._etcd().client_config("", ROOT)) as root:
            EtcdAuth(root).add_host(rp_uuid)
        tls = {"ca_cert": str(self.pki.ca_cert), "cert": str(issued.cert),
               "key": str(issued.key)}
        # The operator's console section is an issuer's (URLs, the proxy's certificate); a
        # host's is its relay's (`write_configs`), and compute.yaml refuses the other.
        operator = {key: value for key, value in self.operator_config().items()
                    if key != "console"}
        return {**operator, "etcd": {**operator["etcd"], **tls},
                "placement": {**operator["placement"], **tls}}

    def write_schedule_config(self, say: Say, project: str | None = None) -> Path:
        """run/schedule.yaml: the operator's (its instances `project`'s)."""
        schedule = self.run_dir / "schedule.yaml"
        config = {**self.operator_config(), "scheduler": self.scheduler_section()}
        if project is not None:
            config["scheduler"]["project_id"] = self._keystone().add_project(project)
        network = self.network_section()
        if network is not None:
            config["network"] = network
        schedule.write_text(yaml.safe_dump(config))
        schedule.chmod(0o600)  # the operator's credentials, the service password
        say(f"configs: {schedule} (operator)")
        return schedule

    def write_configs(self, say: Say) -> None:
        """run/schedule.yaml and run/compute.yaml, for trying commands by hand."""
        info = self.site_info()
        # On Neutron a port is a project's: schedule.py's instances are demo's, on its
        # network (the one the tour's user makes), as make demo has them.
        schedule = self.write_schedule_config(lambda _line: None,
                                              "demo" if info is not None else None)
        local = "00000000-0000-4000-8000-00000000000a"  # the hand-run host "local"
        if info is not None:
            compute = self.neutron_host_config(local)
            (self.run_dir / "compute.yaml").write_text(yaml.safe_dump(compute))
            say(f"configs: {schedule} (operator), {self.run_dir / 'compute.yaml'} (host "
                f"'{HOST}', network.backend neutron)")
            return
        host = self.host_config(local)
        if not self.plain:  # its guests' screens for the console proxy, on loopback
            from tools.local_services.console_proxy import host_section

            host["console"] = host_section(self.pki, "local", "127.0.0.1", 6081)
        compute = {**host,
                   "compute": {"uuid": local, "name": "local",
                               "state_dir": str(LOCAL_VM_FILES / "state"),
                               "instances_dir": str(LOCAL_VM_FILES / "instances")},
                   "driver": {"libvirt": {
                       "domain_type": "qemu",
                       "image_cache_dir": str(LOCAL_VM_FILES / "images"),
                       # file:// images only from where tools/build-test-guest.sh builds.
                       "image_file_dirs": [str(Path.home() / ".cache" / "etcd-compute")],
                       "mdserver_config": str(self.run_dir / "mdserver.conf")}}}
        (self.run_dir / "compute.yaml").write_text(yaml.safe_dump(compute))
        (self.run_dir / "mdserver.conf").write_text(
            f"[mdserver]\ninstances_dir = {LOCAL_VM_FILES / 'instances'}\n"
            f"log_file = {self.run_dir / 'mdserver.log'}\n")
        self.remember_guests("qemu:///system", "etcd-compute", compute, [str(LOCAL_VM_FILES)])
        say(f"configs: {schedule} (operator), {self.run_dir / 'compute.yaml'} (host 'local')")

    def neutron_host_config(self, rp_uuid: str, **compute: Any) -> dict[str, Any]:
        """A compute config for the neutron host (its name is its chassis'): its certificate
        and etcd role, its libvirtd, directories and `network` section."""
        info = self.site_info()
        if info is None:
            raise ServiceUnavailable("the network is not running: make up first")
        host = info["hosts"][HOST]["config"]
        config = {**self.host_config(rp_uuid),
                  "compute": {"uuid": rp_uuid, "name": HOST,
                              "state_dir": host["compute"]["state_dir"],
                              "instances_dir": host["compute"]["instances_dir"], **compute},
                  "driver": host["driver"], "network": host["network"]}
        if not self.plain:  # its guests' screens for the console proxy: the relay is in
            # compute.py, on a free loopback port (the host publishes it; the proxy reads
            # it there); libvirt hands it each screen (qemu in the namespace).
            from tools.local_services.console_proxy import host_section

            config["console"] = host_section(self.pki, HOST, "127.0.0.1")
        return config

    def remember_guests(self, uri: str, network: str, compute_config: dict[str, Any],
                        directories: list[str]) -> None:
        entry = {"uri": uri, "network": network, "compute_config": compute_config,
                 "directories": directories}
        self.guests = [g for g in self.guests if g["directories"] != directories] + [entry]
        self.save()

    def remember_daemon(self, name: str, pid: int, log: str) -> None:
        self.daemons.append({"name": name, "pid": pid, "log": log})
        self.save()

    def remember_provider(self, rp_uuid: str) -> None:
        if rp_uuid not in self.providers:
            self.providers.append(rp_uuid)
            self.save()

    # --- down ---------------------------------------------------------------------------

    def down(self, say: Say) -> None:
        for daemon in self.daemons:
            if pid_alive(daemon["pid"]):
                stop_pid(daemon["pid"], timeout=20)
                say(f"{daemon['name']} stopped (pid {daemon['pid']})")
        self.daemons = []
        self.save()
        self._remove_guest_pieces(say)
        self._forget_providers(say)
        self._down_site(say)
        for name in reversed(self.SERVICES):
            state = getattr(self, name)
            if state and pid_alive(state["pid"]):
                stop_pid(state["pid"])
                say(f"{name} stopped (pid {state['pid']})")
            setattr(self, name, None)
        for pid in reversed(self.libvirt_pids):  # libvirtd before virtlogd
            if pid_alive(pid):
                stop_pid(pid)
                say(f"stopped libvirt daemon (pid {pid})")
        self.libvirt_pids = []
        shutil.rmtree(self.run_dir, ignore_errors=True)
        say(f"removed {self.run_dir}")

    def _down_site(self, say: Say) -> None:
        """site_network.py's process removes what it made (guests, host, outside, Neutron,
        OVN, MariaDB) on SIGTERM, while Keystone still runs."""
        if self.site and pid_alive(self.site["pid"]):
            stop_pid(self.site["pid"], timeout=SITE_STOP_TIMEOUT)
            say(f"Neutron, OVN, host {HOST} and the outside namespace removed "
                f"(pid {self.site['pid']})")
        self.site = None
        self.save()

    def remove_demo_pieces(self, say: Say, directories: list[str]) -> None:
        """What one run of the demo made, when the services stay up: its providers, and the
        guests' pieces recorded with these directories."""
        self._forget_providers(say)
        self._remove_guest_pieces(say, only=directories)

    def _remove_guest_pieces(self, say: Say, only: list[str] | None = None) -> None:
        """The metadata server, libvirt network (and its dnsmasq, bridge, autostart),
        nwfilters and guest files made for our guests (those with `only`'s directories)."""
        from etcd_compute.config import COMPUTE_DEFAULTS, deep_merge
        from etcd_compute.mdserver.supervisor import pid_file_for, running_pid, stop_mdserver
        from etcd_compute.virt.network import remove_network
        from etcd_compute.virt.nwfilter import remove_filters

        chosen = [g for g in self.guests if only is None or g["directories"] == only]
        for guests in chosen:
            config = deep_merge(COMPUTE_DEFAULTS, guests["compute_config"])
            try:
                pid = running_pid(pid_file_for(config))
                stop_mdserver(config)
                if pid:
                    say(f"metadata server stopped (pid {pid})")
                if remove_network(guests["uri"], guests["network"]):
                    say(f"removed libvirt network {guests['network']} (its bridge and dnsmasq)")
                remove_filters(guests["uri"])
            except Exception as exc:  # noqa: BLE001 (libvirt gone: nothing of ours runs there)
                say(f"guest clean-up: {exc.__class__.__name__}: {exc}")
            for directory in guests["directories"]:
                shutil.rmtree(directory, ignore_errors=True)
        self.guests = [g for g in self.guests if g not in chosen]
        self.save()

    def _forget_providers(self, say: Say) -> None:
        if not self.providers or not (self.placement and pid_alive(self.placement["pid"])):
            self.providers = []
            return
        from etcd_compute.placement import PlacementClient

        client = PlacementClient(self.operator_config()["placement"])
        for rp_uuid in self.providers:
            try:
                for consumer in client.get(f"/resource_providers/{rp_uuid}/allocations")[
                        "allocations"]:
                    client.delete_allocations(consumer)
                client.delete_provider(rp_uuid)
            except EtcdComputeError as exc:
                say(f"provider {rp_uuid}: {exc}")
        say(f"removed {len(self.providers)} provider(s) from Placement")
        self.providers = []
        self.save()

    # --- status -------------------------------------------------------------------------

    def status(self) -> list[str]:
        lines = []
        for name in self.SERVICES:
            state = getattr(self, name)
            alive = bool(state and pid_alive(state["pid"]))
            where = f"pid {state['pid']}, port {state['port']}" if state else "not started"
            mode = "" if not state else (", plain" if self.plain else ", TLS")
            lines.append(f"{name}: {'running' if alive else 'stopped'} ({where}{mode})")
        if self.site:
            info = self.site_info()
            if info is None:
                lines.append(f"network: stopped (pid {self.site['pid']})")
            else:
                lines.append(f"network: running (pid {self.site['pid']}, Neutron "
                             f"{info['neutron']}, OVN, host {HOST} in namespace "
                             f"{info['hosts'][HOST]['netns']}, log {self.site['log']})")
                lines.append(f"outside: namespace {info['outside']['netns']} at "
                             f"{info['outside']['address']} on public {info['outside']['cidr']}"
                             " (run/outside COMMAND)")
        if self.libvirt_pids:
            alive = [pid for pid in self.libvirt_pids if pid_alive(pid)]
            lines.append(f"libvirtd: started by us, {len(alive)} of {len(self.libvirt_pids)} "
                         f"daemon(s) running (pids {self.libvirt_pids})")
        else:
            lines.append("libvirtd: not started by us")
        for daemon in self.daemons:
            state = "running" if pid_alive(daemon["pid"]) else "stopped"
            lines.append(f"{daemon['name']}: {state} (pid {daemon['pid']}, log {daemon['log']})")
        for guests in self.guests:
            from etcd_compute.config import COMPUTE_DEFAULTS, deep_merge
            from etcd_compute.mdserver.supervisor import pid_file_for, running_pid

            pid = running_pid(pid_file_for(deep_merge(COMPUTE_DEFAULTS,
                                                      guests["compute_config"])))
            lines.append(f"metadata server for {', '.join(guests['directories'])}: "
                         f"{f'running (pid {pid})' if pid else 'not running'}; network "
                         f"{guests['network']}")
        if self.providers:
            lines.append(f"providers to remove at make down: {len(self.providers)}")
        if (self.run_dir / "clouds.yaml").exists():
            lines.append(f"clouds.yaml: {self.run_dir / 'clouds.yaml'} (OS_CLIENT_CONFIG_FILE; "
                         "clouds etcd-compute, etcd-compute-demo, etcd-compute-alt)")
        return lines


def build_test_guest(say: Say) -> Path | None:
    """The offline test guest's image (built once, then cached), or None if it cannot be
    built here (said why)."""
    result = subprocess.run([str(REPO / "tools" / "build-test-guest.sh")], capture_output=True,
                            text=True, check=False)
    lines = result.stdout.strip().splitlines()
    image = Path(lines[-1]) if lines else None
    if result.returncode or image is None or not image.is_file():
        reason = (result.stderr.strip().splitlines() or ["no image printed"])[-1]
        say(f"could not build the test guest ({reason}); no image uploaded")
        return None
    return image
