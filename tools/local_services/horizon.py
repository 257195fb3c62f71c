"""Horizon, OpenStack's dashboard, on our cloud: gunicorn serving `openstack_dashboard` with
TLS from the cluster CA, in its own virtualenv (.venv-horizon), for `make up` and the tests.

Horizon reads its settings from `local.local_settings`, found on its path: each run writes
its own `local/local_settings.py` in the run directory (0600: it holds a `SECRET_KEY` made
per run) and puts the run directory first on `PYTHONPATH`, so nothing in the virtualenv (or
the repository) holds a secret or a run's addresses. It points Horizon at our Keystone
(`OPENSTACK_KEYSTONE_URL`; the compute API, Glance and Placement are then found in its
catalog), keeps sessions in a file cache in the run directory (Django's cache session
backend: no database), marks the session and CSRF cookies secure (and the session's
HttpOnly; Horizon's JavaScript reads the CSRF cookie, as Django's docs allow), leaves CSRF
on, and answers only on the loopback address it is given.

The static files (collectstatic, then django-compressor's offline `compress`: SCSS to CSS,
which takes a minute of CPU) are made once per virtualenv and settings recipe under the
machine's cache (templates.py's keying) and shared by every run, read-only.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import SERVICE, Pki
from tools.local_services.process import HORIZON_VENV, Service, free_port
from tools.local_services.templates import Template

# What Horizon may offer, said as what this cloud serves (openstack_dashboard/defaults.py
# documents each key). The compute API sets no admin password in a guest (no agent), so
# Horizon does not ask for one; a key pair is optional, as in Nova.
HYPERVISOR_FEATURES = {"can_set_mount_point": False, "can_set_password": False,
                       "requires_keypair": False, "enable_quotas": True}
# No Cinder: the launch wizard offers images and instance snapshots only, never a volume.
LAUNCH_INSTANCE_DEFAULTS = {"config_drive": False, "create_volume": False,
                            "hide_create_volume": True, "disable_image": False,
                            "disable_instance_snapshot": False, "disable_volume": True,
                            "disable_volume_snapshot": True, "enable_scheduler_hints": True,
                            "enable_metadata": True, "enable_net_ports": True,
                            "default_availability_zone": "Any"}
# Neutron where the catalog has it: ML2/OVN networks, subnets, ports, routers and security
# groups; no HA or distributed routers (OVN's are neither), no auto-allocated network.
NEUTRON_NETWORK = {"enable_router": True, "enable_quotas": True, "enable_ipv6": True,
                   "enable_distributed_router": False, "enable_ha_router": False,
                   "enable_fip_topology_check": True, "enable_auto_allocated_network": False,
                   "enable_rbac_policy": True}
# Without Neutron (make up, the walk-through's cloud: guests on each host's libvirt
# network), nothing of Neutron's is offered, and Horizon asks it for nothing it can skip.
NO_NEUTRON = {**{key: False for key in NEUTRON_NETWORK}, "enable_ipv6": False}

# The Console tab: noVNC's page on our console proxy (the remote-consoles API's `novnc`
# URL, docs/explanation/remote-consoles.md) in an iframe. "VNC", not "AUTO": AUTO asks for
# SPICE, RDP, serial and MKS consoles after a VNC one that failed, none of which we serve.
CONSOLE_TYPE = "VNC"

# The static files are compressed ahead of time (django-compressor's offline mode), once.
STATIC_SETTINGS = ("DEBUG = False\nCOMPRESS_OFFLINE = True\nCOMPRESS_ENABLED = True\n"
                   "WEBROOT = '/'\n")


# The WSGI application gunicorn serves: Horizon's, its static files answered in front of it
# by WhiteNoise (Horizon leaves them to a web server; we have none in front). A static path
# with doubled slashes is served as the web servers Horizon is deployed behind serve it
# (nginx's merge_slashes, Apache's path mapping): Horizon's own scripts ask for some so
# (`app/core/images//actions/...`: the Images panel's batch actions, Create Image among
# them, were not shown when WhiteNoise answered 404).
WSGI_MODULE = """\
import re

from django.conf import settings
from whitenoise import WhiteNoise

from openstack_dashboard.wsgi import application as horizon

served = WhiteNoise(horizon, root=settings.STATIC_ROOT, prefix=settings.STATIC_URL,
                    max_age=3600)


def application(environ, start_response):
    path = environ.get("PATH_INFO", "")
    if "//" in path and path.startswith(settings.STATIC_URL):
        environ["PATH_INFO"] = re.sub("/{2,}", "/", path)
    return served(environ, start_response)
"""


def _settings_module(directory: Path, text: str) -> None:
    """`directory/local/local_settings.py` holding `text`, 0600 (it has the secret key)."""
    local = directory / "local"
    local.mkdir(mode=0o700, parents=True, exist_ok=True)
    (local / "__init__.py").write_text("")
    path = local / "local_settings.py"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def _django(settings_dir: Path, *args: str, log: Path) -> None:
    """`django-admin ARGS` with Horizon's settings and `settings_dir`'s local_settings."""
    done = subprocess.run(
        [str(HORIZON_VENV / "bin" / "python"), "-m", "django", *args],
        env={**os.environ, "PYTHONPATH": str(settings_dir),
             "DJANGO_SETTINGS_MODULE": "openstack_dashboard.settings"},
        cwd=settings_dir, capture_output=True, text=True, check=False)
    with open(log, "a") as handle:
        handle.write(f"$ django-admin {' '.join(args)}\n{done.stdout}{done.stderr}")
    if done.returncode:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise ServiceUnavailable(f"Horizon's django-admin {args[0]} failed (exit "
                                 f"{done.returncode}, {log}): {lines[-1][:200]}")


def _build_static(target: Path, console_type: str | None, neutron: bool) -> None:
    """collectstatic and the offline compression into `target`, with the settings of a run
    (compress renders the templates' blocks with them: a setting that changes a page
    changes the blocks a run asks the manifest for)."""
    with tempfile.TemporaryDirectory(prefix="horizon-static-") as scratch:
        settings = Path(scratch)
        _settings_module(settings, _static_recipe(target / "static", console_type, neutron))
        log = target / "build.log"
        _django(settings, "collectstatic", "--noinput", "-v0", log=log)
        _django(settings, "compress", "--force", "-v0", log=log)


def _static_recipe(static: Path, console_type: str | None, neutron: bool) -> str:
    """A run's settings with placeholders for what only a run has (its key, addresses and
    cache): what the static files are made with."""
    return settings_text(secret_key=secrets.token_urlsafe(32),
                         keystone_url="https://keystone.invalid/v3", ca_file=None,
                         static=static, cache_dir=static.parent / "cache",
                         address="127.0.0.1", port=443, console_type=console_type,
                         neutron=neutron)


def static_root(run_dir: Path, console_type: str | None = CONSOLE_TYPE,
                neutron: bool = False) -> Path:
    """Horizon's collected and compressed static files: the cached ones of this virtualenv
    and these settings (built now if missing), or, with the cache off, the run
    directory's own."""
    recipe = _static_recipe(Path("/static"), console_type, neutron)
    recipe = "\n".join(line for line in recipe.splitlines()
                       if not line.startswith("SECRET_KEY"))
    template = Template("horizon-static", HORIZON_VENV, recipe)
    directory = template.ensure(lambda target: _build_static(target, console_type, neutron))
    if directory is None:
        directory = run_dir / "static-build"
        if not (directory / "static").is_dir():
            directory.mkdir(parents=True, exist_ok=True)
            _build_static(directory, console_type, neutron)
    return directory / "static"


def settings_text(*, secret_key: str, keystone_url: str, ca_file: str | None,
                  static: Path, cache_dir: Path, address: str, port: int,
                  console_type: str | None = CONSOLE_TYPE, neutron: bool = False) -> str:
    """The run's local_settings.py (`neutron`: Neutron is in the catalog)."""
    settings: dict[str, Any] = {
        "SECRET_KEY": secret_key,
        "ALLOWED_HOSTS": sorted({address, "localhost", "127.0.0.1"}),
        "CSRF_TRUSTED_ORIGINS": [f"https://{address}:{port}"],
        "OPENSTACK_KEYSTONE_URL": keystone_url,
        "OPENSTACK_KEYSTONE_DEFAULT_DOMAIN": "Default",
        "OPENSTACK_KEYSTONE_DEFAULT_ROLE": "member",
        "OPENSTACK_SSL_CACERT": ca_file,
        "OPENSTACK_SSL_NO_VERIFY": False,
        "OPENSTACK_ENDPOINT_TYPE": "publicURL",
        "STATIC_ROOT": str(static),
        "SESSION_ENGINE": "django.contrib.sessions.backends.cache",
        "CACHES": {"default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(cache_dir)}},
        "SESSION_COOKIE_SECURE": True,
        "SESSION_COOKIE_HTTPONLY": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "OPENSTACK_HYPERVISOR_FEATURES": HYPERVISOR_FEATURES,
        "OPENSTACK_NEUTRON_NETWORK": NEUTRON_NETWORK if neutron else NO_NEUTRON,
        "LAUNCH_INSTANCE_DEFAULTS": LAUNCH_INSTANCE_DEFAULTS,
        "OPENSTACK_ENABLE_PASSWORD_RETRIEVE": False,
        "OPENSTACK_ENABLE_INSTANCE_PASSWORD_CHANGE": False,
        # The Console tab (CONSOLE_TYPE above); None: no tab.
        "CONSOLE_TYPE": console_type,
        "HORIZON_IMAGES_UPLOAD_MODE": "legacy",
        "OPENSTACK_CLOUDS_YAML_NAME": "etcd-compute",
        "LOGGING": {
            "version": 1, "disable_existing_loggers": False,
            "formatters": {"plain": {
                "format": "%(asctime)s %(process)d %(thread)d %(levelname)s %(name)s %(message)s"}},
            "handlers": {"console": {"class": "logging.StreamHandler",
                                     "formatter": "plain"}},
            "root": {"handlers": ["console"], "level": "INFO"},
            # Every call Horizon makes to the cloud and its answer's status
            # ("RESP: [404] ..."): the tests read them for answers Nova would not give.
            "loggers": {**{name: {"level": "DEBUG"} for name in (
                "keystoneauth", "novaclient", "glanceclient", "keystoneclient",
                "openstack")}, "django.request": {"level": "WARNING"}},
        },
    }
    lines = ["# Made by tools/local_services/horizon.py for this run; not to be kept.",
             STATIC_SETTINGS.strip()]
    lines += [f"{key} = {value!r}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


class HorizonServer(Service):
    """The dashboard at https://<address>:<port>/ (gunicorn, TLS of the cluster CA)."""

    pki: Pki | None = None

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None, pki: Pki | None = None,
               address: str = "127.0.0.1") -> HorizonServer:
        server = cls("horizon", run_dir, port or free_port(), extra={"address": address})
        server.pki = pki
        return server

    @property
    def address(self) -> str:
        return self.extra.get("address", "127.0.0.1")

    @property
    def url(self) -> str:
        return f"{'https' if self.pki else 'http'}://{self.address}:{self.port}/"

    def _write_settings(self, keystone_url: str, ca_file: str | None,
                        console_type: str | None, neutron: bool) -> None:
        cache = self.run_dir / "cache"
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        (self.run_dir / "horizon_wsgi.py").write_text(WSGI_MODULE)
        _settings_module(self.run_dir, settings_text(
            secret_key=secrets.token_urlsafe(48), keystone_url=keystone_url,
            ca_file=ca_file, static=static_root(self.run_dir, console_type, neutron),
            cache_dir=cache, address=self.address, port=self.port, console_type=console_type,
            neutron=neutron))

    def start(self, keystone_url: str, ca_file: str | None,
              console_type: str | None = CONSOLE_TYPE,
              neutron: bool = False, timeout: float = 120) -> HorizonServer:
        """Serve the dashboard of the cloud at `keystone_url` (its certificates signed by
        `ca_file`); `neutron`: the catalog has Neutron's `network` service."""
        gunicorn = HORIZON_VENV / "bin" / "gunicorn"
        if not gunicorn.exists():
            raise ServiceUnavailable(f"Horizon is not installed in {HORIZON_VENV}; "
                                     "run: make install")
        if self.pki is None:
            raise ServiceUnavailable("Horizon is served with TLS only (its cookies are "
                                     "secure): start it with the cluster's PKI")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        issued = self.pki.issue("horizon", SERVICE, ips=[self.address], dns=["localhost"])

        def start_once() -> None:
            self._write_settings(keystone_url, ca_file, console_type, neutron)
            self._spawn([str(gunicorn), "--bind", f"{self.address}:{self.port}",
                         "--workers", "2", "--threads", "4", "--timeout", "120",
                         "--no-control-socket",
                         "--certfile", str(issued.cert), "--keyfile", str(issued.key),
                         "horizon_wsgi:application"],
                        env={"PYTHONPATH": str(self.run_dir),
                             "DJANGO_SETTINGS_MODULE": "openstack_dashboard.settings",
                             # requests lets REQUESTS_CA_BUNDLE from the environment
                             # outrank a session's own CA (Horizon's Glance client sets
                             # OPENSTACK_SSL_CACERT on its session): it names ours too.
                             **({"REQUESTS_CA_BUNDLE": ca_file} if ca_file else {})},
                        cwd=self.run_dir)
            self._wait_healthy(self.url + "auth/login/", timeout, str(self.pki.ca_cert))

        self.start_on_a_free_port(start_once)
        return self

    def stop(self) -> None:
        super().stop()
        # The per-run secret and the sessions go with the process.
        for leftover in ("local", "cache"):
            shutil.rmtree(self.run_dir / leftover, ignore_errors=True)
        (self.run_dir / "horizon_wsgi.py").unlink(missing_ok=True)
