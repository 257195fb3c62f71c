"""Placement under gunicorn in its own virtualenv, on SQLite or a throwaway PostgreSQL.

A new SQLite database is a copy of the template's (templates.py: `placement-manage db sync`
run once per virtualenv); PostgreSQL, or a database already there, is synced per start."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import OPERATOR, PLACEMENT, ROOT, Pki
from tools.local_services.keystone import KeystoneServer
from tools.local_services.process import PLACEMENT_VENV, Service, free_port, port_open, wait_until
from tools.local_services.templates import SyncedDatabase, Template

POSTGRES_BIN = Path("/usr/lib/postgresql/15/bin")


DATABASE = SyncedDatabase("placement", PLACEMENT_VENV, "placement_database",
                          ("placement-manage", "db", "sync"), "placement.sqlite")


def template() -> Template:
    return DATABASE.template()


class PostgresServer(Service):
    """A throwaway PostgreSQL cluster (Debian's binaries) for multi-worker Placement."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> PostgresServer:
        return cls("postgres", run_dir, port or free_port())

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://placement:placement@127.0.0.1:{self.port}/placement"

    def _as_postgres(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["runuser", "-u", "postgres", "--", *argv],
            capture_output=True, text=True, check=False,
        )

    def start(self) -> PostgresServer:
        if not (POSTGRES_BIN / "postgres").exists():
            raise ServiceUnavailable("PostgreSQL is not installed; run: make install")
        # The postgres user must reach its data dir; pytest's and mkdtemp's dirs are
        # root-only, so the cluster lives in a world-traversable dir of its own.
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if "data_dir" not in self.extra:
            self.extra["data_dir"] = tempfile.mkdtemp(prefix="etcd-compute-pg-")
        home = Path(self.extra["data_dir"])
        home.chmod(0o755)
        shutil.chown(home, "postgres")
        data = home / "data"
        if not data.exists():
            result = self._as_postgres(
                [str(POSTGRES_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
            )
            if result.returncode:
                raise ServiceUnavailable(f"initdb failed: {result.stderr.strip()[-200:]}")
        self._spawn(
            [
                "runuser", "-u", "postgres", "--",
                str(POSTGRES_BIN / "postgres"), "-D", str(data),
                "-p", str(self.port), "-k", str(home), "-h", "127.0.0.1",
                "-c", "max_connections=200", "-c", "fsync=off",
            ]
        )
        wait_until(lambda: port_open(self.port), 30, "PostgreSQL")
        base = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-q", "-c"]
        for statement in (
            "CREATE ROLE placement LOGIN PASSWORD 'placement'",
            "CREATE DATABASE placement OWNER placement",
        ):
            self._as_postgres([*base, statement])
        return self

    def stop(self) -> None:
        super().stop()
        if "data_dir" in self.extra:
            shutil.rmtree(self.extra.pop("data_dir"), ignore_errors=True)


class PlacementServer(Service):
    """OpenStack Placement under gunicorn, noauth2, in its own virtualenv.

    `allocation_conflict_retry_count = 1`: with the default of 10 and several
    workers, two racing claims for the last unit both succeeded in over half
    of the trials measured here. Our scheduler retries 409s itself.

    With a `Pki`, gunicorn serves TLS and requires a client certificate of the
    cluster CA (`--cert-reqs 2`): only holders of cluster certificates reach it.

    With a `KeystoneServer`, `[api] auth_strategy = keystone`: keystonemiddleware
    checks every token with that Keystone, as the service user `placement`.
    """

    pki: Pki | None = None
    keystone: KeystoneServer | None = None
    # Placement's own service user in Keystone (it validates the clients' tokens).
    service_password = "placement-service-secret"

    @classmethod
    def create(
        cls, run_dir: Path, port: int | None = None, db_url: str | None = None,
        workers: int = 1, pki: Pki | None = None, ip: str = "127.0.0.1",
        name: str = "placement", keystone: KeystoneServer | None = None,
    ) -> PlacementServer:
        """`name`: of its log and certificate (two on one PKI need two names)."""
        db_url = db_url or f"sqlite:///{run_dir / 'placement.sqlite'}"
        if db_url.startswith("sqlite") and workers != 1:
            raise ValueError("Placement on SQLite needs exactly one worker")
        server = cls(
            name, run_dir, port or free_port(),
            extra={"db_url": db_url, "workers": str(workers), "ip": ip},
        )
        server.pki, server.keystone = pki, keystone
        return server

    @property
    def endpoint(self) -> str:
        scheme = "https" if self.pki else "http"
        return f"{scheme}://{self.extra.get('ip', '127.0.0.1')}:{self.port}"

    def client_config(self, user: str = "operator") -> dict[str, Any]:
        """A `placement:` config section; with TLS, as the certificate `user`."""
        config: dict[str, Any] = {"endpoint": self.endpoint, "token": "admin", "timeout": 30.0}
        if self.pki:
            issued = self.pki.issue(user, ROOT if user == "root" else OPERATOR)
            config.update(ca_cert=str(self.pki.ca_cert), cert=str(issued.cert),
                          key=str(issued.key))
        return config

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "placement-conf"

    def _keystone_authtoken(self) -> str:
        """The `[keystone_authtoken]` section: who validates tokens, and as whom."""
        if self.keystone is None:
            return ""
        self.keystone.add_user("placement", self.service_password, "service", "service")
        url = self.keystone.auth_url
        return (
            "[keystone_authtoken]\n"
            f"www_authenticate_uri = {url}\n"
            f"auth_url = {url}\n"
            "auth_type = password\n"
            "username = placement\n"
            f"password = {self.service_password}\n"
            "project_name = service\n"
            "user_domain_name = Default\n"
            "project_domain_name = Default\n"
            # No memcached: without this, a revoked token stays valid in each worker's
            # own cache for five minutes.
            "token_cache_time = -1\n"
            + (f"cafile = {self.keystone.ca_file}\n" if self.keystone.ca_file else "")
        )

    def _write_config(self) -> Path:
        self.config_dir.mkdir(parents=True, exist_ok=True)
        conf = self.config_dir / "placement.conf"
        conf.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "[api]\n"
            f"auth_strategy = {'keystone' if self.keystone else 'noauth2'}\n"
            "[placement]\n"
            "allocation_conflict_retry_count = 1\n"
            # Otherwise `limit` always returns the same first hosts to every scheduler.
            "randomize_allocation_candidates = True\n"
            + DATABASE.config(self.extra["db_url"])
            + self._keystone_authtoken()
        )
        return conf

    def start(self) -> PlacementServer:
        gunicorn = PLACEMENT_VENV / "bin" / "gunicorn"
        manage = PLACEMENT_VENV / "bin" / "placement-manage"
        if not gunicorn.exists() or not manage.exists():
            raise ServiceUnavailable(f"Placement is not installed in {PLACEMENT_VENV}; "
                                     "run: make install")
        conf = self._write_config()
        DATABASE.prepare(conf, self.extra["db_url"])
        tls: list[str] = []
        verify: str | bool = True
        cert = None
        if self.pki:
            issued = self.pki.issue(self.name, PLACEMENT, ips=sorted({self.extra["ip"],
                                                                     "127.0.0.1"}))
            # CERT_REQUIRED: no cluster certificate, no TLS session.
            tls = ["--certfile", str(issued.cert), "--keyfile", str(issued.key),
                   "--ca-certs", str(self.pki.ca_cert), "--cert-reqs", "2"]
            probe = self.pki.issue("operator", OPERATOR)
            verify, cert = str(self.pki.ca_cert), (str(probe.cert), str(probe.key))
        self.start_on_a_free_port(lambda: self._spawn_and_wait(gunicorn, tls, verify, cert))
        return self

    def _spawn_and_wait(self, gunicorn: Path, tls: list[str], verify: str | bool,
                        cert: tuple[str, str] | None) -> None:
        self._spawn(
            [
                str(gunicorn),
                "--workers", self.extra["workers"],
                # Keeps the clients' connections (a sync worker closes each after one
                # response: a TLS handshake per call, a quarter of a compute's main loop
                # in the tests); one thread, as SQLite wants.
                "--worker-class", "gthread", "--threads", "1", "--keep-alive", "60",
                "--bind", f"{self.extra['ip']}:{self.port}",
                "--no-control-socket",
                "--timeout", "120",
                *tls,
                "placement.wsgi.api:application",
            ],
            env={"OS_PLACEMENT_CONFIG_DIR": str(self.config_dir)},
        )
        self._wait_healthy(self.endpoint + "/", 60, verify, cert)
