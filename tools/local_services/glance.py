"""Glance (the image service) under gunicorn in its own virtualenv, behind Keystone.

As Glance's install guide sets it up, with every file under the run directory: a file
store, SQLite (`glance-manage db_sync`; PostgreSQL in the multi-host guide), the paste
pipeline flavor `keystone` (keystonemiddleware's auth_token checks every token with the
Keystone given), served by gunicorn from Glance's WSGI entry (`glance.wsgi.api`). With a
`Pki` it serves TLS with a certificate of the cluster CA. Loopback only. A new SQLite
database is a copy of the template's (templates.py: db_sync run once per virtualenv).

Glance's policy is its own defaults (secure RBAC) but for one rule: `context_is_admin`
holds for the `service` role too, so the service users (`etcd-compute`: the compute hosts
download any project's image, snapshots are uploaded owned by the instance's project;
`glance` itself) act as Nova's service user does with its admin role, in Glance only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import SERVICE, Pki
from tools.local_services.keystone import DOMAIN, KeystoneServer
from tools.local_services.process import GLANCE_VENV, Service, free_port
from tools.local_services.templates import SyncedDatabase, Template

# Glance's own user in Keystone (it validates the clients' tokens as this user).
GLANCE_USER = "glance"
POLICY = '"context_is_admin": "role:admin or role:service"\n'


# Its metadata definitions loaded as its install guide has them (`db_load_metadefs`): what
# Horizon's launch wizard and image forms offer as metadata (with none, Horizon fails).
DATABASE = SyncedDatabase("glance", GLANCE_VENV, "database", ("glance-manage", "db_sync"),
                          "glance.sqlite", then=(("glance-manage", "db_load_metadefs", str(
                              (GLANCE_VENV / "etc" / "glance" / "metadefs").resolve())),))


def template() -> Template:
    return DATABASE.template()


class GlanceServer(Service):
    """Glance's API v2 on loopback, authenticating with `keystone`."""

    pki: Pki | None = None
    keystone: KeystoneServer | None = None

    @classmethod
    def create(cls, run_dir: Path, keystone: KeystoneServer, port: int | None = None,
               pki: Pki | None = None, db_url: str | None = None) -> GlanceServer:
        server = cls("glance", run_dir, port or free_port(),
                     extra={"db_url": db_url or f"sqlite:///{run_dir / 'glance.sqlite'}"})
        server.pki, server.keystone = pki, keystone
        return server

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.pki else 'http'}://127.0.0.1:{self.port}"

    @property
    def config_dir(self) -> Path:
        return self.run_dir / "glance-conf"

    @property
    def store_dir(self) -> Path:
        """The file store: one file per image, named by its id."""
        return self.run_dir / "glance-images"

    def image_file(self, image_id: str) -> Path:
        return self.store_dir / image_id

    def _write_config(self) -> Path:
        assert self.keystone is not None
        self.config_dir.mkdir(parents=True, exist_ok=True)
        for name in ("glance-images", "glance-staging", "glance-tasks"):
            (self.run_dir / name).mkdir(parents=True, exist_ok=True)
        shutil.copy(GLANCE_VENV / "etc" / "glance" / "glance-api-paste.ini",
                    self.config_dir / "glance-api-paste.ini")
        (self.config_dir / "policy.yaml").write_text(POLICY)
        keystone = self.keystone
        cafile = f"cafile = {keystone.ca_file}\n" if keystone.ca_file else ""
        conf = self.config_dir / "glance-api.conf"
        conf.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "enabled_backends = file:file\n"
            # Only uploads through the API: `web-download` would make Glance fetch any URL a
            # user names (from this host's network), `copy-image` needs several stores.
            "enabled_import_methods = [glance-direct]\n"
            f"worker_self_reference_url = {self.endpoint}\n"
            + DATABASE.config(self.extra["db_url"]) +
            "[glance_store]\n"
            "default_backend = file\n"
            f"[file]\nfilesystem_store_datadir = {self.store_dir}\n"
            f"[os_glance_staging_store]\nfilesystem_store_datadir = "
            f"{self.run_dir / 'glance-staging'}\n"
            f"[os_glance_tasks_store]\nfilesystem_store_datadir = "
            f"{self.run_dir / 'glance-tasks'}\n"
            "[paste_deploy]\n"
            "flavor = keystone\n"
            f"config_file = {self.config_dir / 'glance-api-paste.ini'}\n"
            "[oslo_policy]\n"
            "enforce_new_defaults = True\n"
            "enforce_scope = True\n"
            f"policy_file = {self.config_dir / 'policy.yaml'}\n"
            "[keystone_authtoken]\n"
            f"www_authenticate_uri = {keystone.auth_url}\n"
            f"auth_url = {keystone.auth_url}\n"
            f"{cafile}"
            "auth_type = password\n"
            f"username = {GLANCE_USER}\n"
            f"password = {keystone.password(GLANCE_USER)}\n"
            "project_name = service\n"
            f"user_domain_name = {DOMAIN}\n"
            f"project_domain_name = {DOMAIN}\n"
            # No memcached: without this, a revoked token stays valid in the worker's own
            # cache for five minutes.
            "token_cache_time = -1\n"
        )
        return conf

    def prepare(self) -> None:
        """Config and database (needs no Keystone: run it while Keystone starts)."""
        gunicorn, manage = GLANCE_VENV / "bin" / "gunicorn", GLANCE_VENV / "bin" / "glance-manage"
        if not gunicorn.exists() or not manage.exists():
            raise ServiceUnavailable(f"Glance is not installed in {GLANCE_VENV}; "
                                     "run: make install")
        conf = self._write_config()
        DATABASE.prepare(conf, self.extra["db_url"])

    def spawn(self) -> None:
        """Start gunicorn (after `prepare`); `wait` for it to answer."""
        tls: list[str] = []
        if self.pki:
            issued = self.pki.issue("glance", SERVICE, ips=["127.0.0.1"], dns=["localhost"])
            tls = ["--certfile", str(issued.cert), "--keyfile", str(issued.key)]
        self._spawn([str(GLANCE_VENV / "bin" / "gunicorn"),
                     # Threads: an image download streams for a while; others go on.
                     "--workers", "1", "--threads", "8", "--worker-class", "gthread",
                     "--bind", f"127.0.0.1:{self.port}", "--no-control-socket",
                     "--timeout", "120", *tls, "glance.wsgi.api:application"],
                    env={"OS_GLANCE_CONFIG_DIR": str(self.config_dir)})

    def wait(self, timeout: float = 90) -> GlanceServer:
        verify = str(self.pki.ca_cert) if self.pki else True
        self._wait_healthy(self.endpoint + "/healthcheck", timeout, verify)
        return self

    def start(self) -> GlanceServer:
        """Prepare, spawn and wait (the Glance service user must exist in Keystone before
        a request with a token arrives: `cloud.bootstrap`)."""
        self.prepare()
        self.spawn()
        return self.wait()

    def client_config(self, keystone_section: dict[str, Any]) -> dict[str, Any]:
        """A `glance:` config section: this endpoint, as the user of `keystone_section`."""
        config: dict[str, Any] = {"endpoint": self.endpoint, "keystone": keystone_section}
        if self.pki:
            config["ca_cert"] = str(self.pki.ca_cert)
        return config
