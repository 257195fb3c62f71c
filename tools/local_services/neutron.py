"""Neutron's API server with ML2/OVN, under gunicorn in its own virtualenv, behind Keystone.

As Neutron's install guide for OVN sets it up, with every file under the run directory:
ML2 with the `ovn` mechanism driver (geneve project networks, flat provider ones on
`physnet1`, port security, centralized floating IPs) and the `ovn-router` service plugin,
writing to the northbound database of an `OvnCentral` (ovn.py); its database on a
`MariaDBServer` (mariadb.py; Neutron's migrations run on MySQL/MariaDB only);
keystonemiddleware's auth_token checks every token with the Keystone given, as the service
user `neutron`. Served by gunicorn from Neutron's WSGI entry
(`neutron.wsgi.api`; PyPI's neutron has no `neutron-server` script). With a `Pki` it serves
TLS with a certificate of the cluster CA. Loopback only.

A new database is loaded from a template (templates.py): the SQL dump of a database
`neutron-db-manage upgrade heads` migrated, made once per virtualenv and MariaDB (the
migrations took 5.4 s, 3.4 s of CPU; the dump loads in 0.5 s). A database already there
(a server started again on the same MariaDB) is upgraded in place.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import SERVICE, Pki
from tools.local_services import mariadb
from tools.local_services.keystone import DOMAIN, KeystoneServer
from tools.local_services.mariadb import MariaDBServer
from tools.local_services.ovn import OvnCentral
from tools.local_services.process import NEUTRON_VENV, Service, free_port
from tools.local_services.templates import Template

# Neutron's own user in Keystone (it validates the clients' tokens as this user).
NEUTRON_USER = "neutron"
SERVICE_ROLE = "service"
DATABASE = "neutron"
MIGRATION = ("upgrade", "heads")
DUMP = "neutron.sql"
# Neutron's defaults (secure RBAC) but for one rule: the compute hosts' service user may read
# floating IPs, so a host's metadata server answers its guest's public-ipv4 (Nova's [neutron]
# user, an admin, reads them for its metadata; Neutron's default is admin or the project's
# reader). docs/explanation/networking.md#addresses-and-a-guests-password.
POLICY = (
    '"get_floatingip": "(rule:admin_only) or (role:reader and project_id:%(project_id)s) '
    'or (rule:service_api)"\n'
)


# gunicorn's config. Neutron's ML2/OVN driver takes SIGTERM over in the worker (oslo.service's
# SignalHandler, to take the worker out of OVN's hash ring), and gunicorn's own handler was
# never called again: the worker went on serving until the master's graceful timeout (30 s)
# killed it. So, once the app is loaded, SIGTERM runs Neutron's handler, then gunicorn's.
GUNICORN_CONF = """\
import signal

wsgi_app = "neutron.wsgi.api:application"


def post_worker_init(worker):
    neutrons = signal.getsignal(signal.SIGTERM)

    def both(signum, frame):
        if callable(neutrons):
            neutrons(signum, frame)
        worker.handle_exit(signum, frame)

    signal.signal(signal.SIGTERM, both)
"""


def ml2_config(ovn: OvnCentral) -> str:
    """ML2 with OVN, and OVN's databases (their TCP remotes on loopback)."""
    return (
        "[ml2]\n"
        "type_drivers = geneve,flat\n"
        # (tenant_network_types before: deprecated, it says so in the log)
        "project_network_types = geneve\n"
        "mechanism_drivers = ovn\n"
        "extension_drivers = port_security\n"
        # Flat provider networks on physnet1 only: the hosts' br-ex (outside.py).
        "[ml2_type_flat]\n"
        "flat_networks = physnet1\n"
        "[ml2_type_geneve]\n"
        # No range, no project network ("No tenant network is available for allocation").
        "vni_ranges = 1:65536\n"
        # OVN's Geneve header carries its own option (ML2's default, 30, is for OVS agents).
        "max_header_size = 38\n"
        "[ovn]\n"
        f"ovn_nb_connection = {ovn.nb.connection}\n"
        # Each network's OVN metadata port (a localport), for the hosts' metadata agents.
        "ovn_metadata_enabled = True\n"
        # A floating IP's NAT on the router's gateway chassis (Neutron's default): a live
        # move then keeps it through the guest's RARP, not only once the destination's
        # binding is activated (docs/explanation/networking.md#moves).
        "enable_distributed_floating_ip = False\n"
        f"ovn_sb_connection = {ovn.sb.connection}\n"
    )


def _db_manage(conf: Path, log: Path, *args: str) -> None:
    manage = NEUTRON_VENV / "bin" / "neutron-db-manage"
    with open(log, "ab") as output:
        done = subprocess.run([str(manage), "--config-file", str(conf), *args],
                              stdout=output, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, check=False)
    if done.returncode:
        lines = log.read_text(errors="replace").strip().splitlines() or ["(no output)"]
        raise ServiceUnavailable(f"neutron-db-manage {' '.join(args)} failed (exit "
                                 f"{done.returncode}, {log}): {lines[-1][:200]}")


def template() -> Template:
    """The migrated database's dump: this virtualenv's migrations, on this MariaDB (its
    version and server options: the dump names the tables' character sets)."""
    recipe = json.dumps([list(MIGRATION), mariadb.version(), mariadb.OPTIONS])
    return Template("neutron", NEUTRON_VENV, recipe)


class NeutronServer(Service):
    """Neutron's API v2.0 on loopback, authenticating with `keystone`."""

    keystone: KeystoneServer
    database: MariaDBServer
    ovn: OvnCentral
    pki: Pki | None = None
    workers: int = 1

    @classmethod
    def create(cls, run_dir: Path, keystone: KeystoneServer, database: MariaDBServer,
               ovn: OvnCentral, port: int | None = None,
               pki: Pki | None = None, workers: int = 1) -> NeutronServer:
        """`workers`: API worker processes, each serving one request at a time (Neutron's
        own default, `api_workers`, is one per core; the tests' many short-lived stacks
        keep one)."""
        if not 1 <= workers <= 16:
            raise ValueError(f"Neutron API workers: {workers} is not 1 to 16")
        server = cls("neutron", run_dir, port or free_port(),
                     extra={"db_password": secrets.token_urlsafe(18)})
        server.keystone, server.database, server.ovn, server.pki = keystone, database, ovn, pki
        server.workers = workers
        return server

    @property
    def endpoint(self) -> str:
        """Its URL, as the catalog's `network` service names it (the client adds /v2.0)."""
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    @property
    def verify(self) -> str | bool:
        return str(self.pki.ca_cert) if self.pki else True

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "neutron-conf"

    @property
    def db_url(self) -> str:
        return self.database.url(DATABASE, NEUTRON_USER, self.extra["db_password"])

    def _keystone_authtoken(self) -> str:
        keystone = self.keystone
        return (
            "[keystone_authtoken]\n"
            f"www_authenticate_uri = {keystone.auth_url}\n"
            f"auth_url = {keystone.auth_url}\n"
            + (f"cafile = {keystone.ca_file}\n" if keystone.ca_file else "") +
            "auth_type = password\n"
            f"username = {NEUTRON_USER}\n"
            f"password = {keystone.password(NEUTRON_USER)}\n"
            "project_name = service\n"
            f"user_domain_name = {DOMAIN}\n"
            f"project_domain_name = {DOMAIN}\n"
            # No memcached: without this, a revoked token stays valid in the worker's own
            # cache for five minutes.
            "token_cache_time = -1\n"
        )

    def _nova(self) -> str:
        """Whom Neutron tells of a server's ports, as whom: the compute API found in the
        catalog (type `compute`, RegionOne, its public endpoint), as Neutron's own service
        user (role `service`: Nova's rule for os-server-external-events), verifying its TLS
        with the cluster CA."""
        keystone = self.keystone
        cafile = self.pki.ca_cert if self.pki else keystone.ca_file
        return (
            "[nova]\n"
            "auth_type = password\n"
            f"auth_url = {keystone.auth_url}\n"
            f"username = {NEUTRON_USER}\n"
            f"password = {keystone.password(NEUTRON_USER)}\n"
            "project_name = service\n"
            f"user_domain_name = {DOMAIN}\n"
            f"project_domain_name = {DOMAIN}\n"
            "region_name = RegionOne\n"
            "endpoint_type = public\n"
            + (f"cafile = {cafile}\n" if cafile else "")
        )

    def _write_config(self) -> Path:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for name in ("state", "lock", "tmp"):
            (self.run_dir / name).mkdir(exist_ok=True)
        # Found beside neutron.conf (oslo.config looks in the config files' directories).
        shutil.copy(NEUTRON_VENV / "etc" / "neutron" / "api-paste.ini",
                    self.config_dir / "api-paste.ini")
        (self.config_dir / "policy.yaml").write_text(POLICY)
        conf = self.config_dir / "neutron.conf"
        conf.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "use_stderr = True\n"
            "core_plugin = ml2\n"
            "service_plugins = ovn-router\n"
            "auth_strategy = keystone\n"
            f"state_path = {self.run_dir / 'state'}\n"
            # ML2/OVN has no RPC agents, yet ML2 still casts its resource updates to them
            # over oslo.messaging (fanout). With no transport_url that is RabbitMQ on
            # localhost:5672, and a network create waited two minutes on its retries.
            # oslo.messaging's in-process fake driver delivers a fanout to the listeners
            # this process has (none): nothing is sent anywhere, nothing queues up.
            "transport_url = fake:/\n"
            # Nova's os-server-external-events: a port of a server (device_owner compute:*)
            # that goes up is `network-vif-plugged`, one whose addresses change
            # `network-changed`, POSTed to the `compute` service of the catalog (our compute
            # API, when one runs) as [nova]'s user; gathered for send_events_interval.
            "notify_nova_on_port_status_changes = True\n"
            "notify_nova_on_port_data_changes = True\n"
            "send_events_interval = 1\n"
            f"[database]\nconnection = {self.db_url}\n"
            f"[oslo_concurrency]\nlock_path = {self.run_dir / 'lock'}\n"
            + f"[oslo_policy]\npolicy_file = {self.config_dir / 'policy.yaml'}\n"
            + ml2_config(self.ovn)
            + self._keystone_authtoken()
            + self._nova()
        )
        # Neutron's config parser reads the process's argv: gunicorn's own options would be
        # refused as unknown, so gunicorn takes them from this file and the environment.
        (self.config_dir / "gunicorn.conf.py").write_text(GUNICORN_CONF)
        return conf

    def _build_template(self, directory: Path) -> None:
        """The dump of a scratch database on this MariaDB as the migrations leave it."""
        scratch = f"neutron_template_{secrets.token_hex(4)}"
        self.database.ensure_database(scratch, NEUTRON_USER, self.extra["db_password"])
        try:
            with tempfile.TemporaryDirectory(prefix="neutron-template-") as work:
                conf = Path(work) / "neutron.conf"
                conf.write_text("[database]\nconnection = " + self.database.url(
                    scratch, NEUTRON_USER, self.extra["db_password"]) + "\n")
                _db_manage(conf, self.run_dir / "neutron-db-manage.log", *MIGRATION)
            self.database.dump(scratch, directory / DUMP)
        finally:
            self.database.drop_database(scratch)

    def prepare_database(self, conf: Path) -> None:
        """Neutron's database and user on the MariaDB; a new database loaded from the
        template (or migrated, without one), one already there upgraded."""
        new = self.database.ensure_database(DATABASE, NEUTRON_USER, self.extra["db_password"])
        dump = self.run_dir / DUMP
        if new and template().copy(self._build_template, {DUMP: dump}):
            self.database.load(DATABASE, dump)
            dump.unlink()
            return
        _db_manage(conf, self.run_dir / "neutron-db-manage.log", *MIGRATION)

    def start(self) -> NeutronServer:
        gunicorn = NEUTRON_VENV / "bin" / "gunicorn"
        if not gunicorn.exists() or not (NEUTRON_VENV / "bin" / "neutron-db-manage").exists():
            raise ServiceUnavailable(f"Neutron is not installed in {NEUTRON_VENV}; "
                                     "run: make install")
        self.keystone.add_user(NEUTRON_USER, None, "service", SERVICE_ROLE)
        conf = self._write_config()
        self.prepare_database(conf)
        tls = ""
        if self.pki:
            issued = self.pki.issue("neutron", SERVICE, ips=["127.0.0.1"], dns=["localhost"])
            tls = f" --certfile {issued.cert} --keyfile {issued.key}"

        def start_once() -> None:
            self._spawn([str(gunicorn)], env={
                "OS_NEUTRON_CONFIG_DIR": str(self.config_dir),
                "OS_NEUTRON_CONFIG_FILES": "neutron.conf",
                # Neutron asks its WSGI server how many API workers it has (uwsgi's and
                # mod_wsgi's modules, else this variable): OVN's hash ring refuses to work
                # without the count ("The Neutron API workers count is zero").
                "ASGI_WORKERS": str(self.workers),
                # Its workers elect a first one through files named by their parent's pid in
                # the temp dir: here, not left in /tmp.
                "TMPDIR": str(self.run_dir / "tmp"),
                # gthread with one thread keeps the clients' connections (a TLS handshake
                # per request otherwise), one request at a time per worker.
                "GUNICORN_CMD_ARGS": (f"--bind 127.0.0.1:{self.port} --workers {self.workers} "
                                      "--worker-class gthread --threads 1 --keep-alive 60 "
                                      "--no-control-socket --timeout 120"
                                      f"{tls} --config {self.config_dir / 'gunicorn.conf.py'}"),
            })
            # The versions document answers without a token once the worker has loaded
            # the plugins and connected to OVN.
            self._wait_healthy(self.endpoint + "/", 120, self.verify)

        self.start_on_a_free_port(start_once)
        return self

    def stop(self) -> None:
        """gunicorn's master by its pid (it stops its worker), then whatever is left of its
        process group (a worker orphaned by a master killed after its timeout)."""
        pid = self.pid
        super().stop()
        if pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
