"""Keystone under gunicorn in its own virtualenv, on SQLite: the identity service of `make up`,
`make demo` and the tests (Glance and, where asked, Placement validate its tokens).

Set up as its install guide does (`keystone-manage db_sync`, `fernet_setup`,
`credential_setup`, `bootstrap`), with every file under the run directory; projects, users
and the service catalog are then made through its API as the admin (`cloud.py`). A new run
directory's database is a copy of the template's (templates.py: db_sync and bootstrap, run
once per virtualenv), its endpoints and admin password then set as bootstrap would set them;
the key repositories are made as fernet_setup makes them, without keystone-manage. With a
`Pki` it serves TLS with a certificate of the cluster CA (clients verify it with the CA;
they authenticate with passwords, not certificates). Loopback only.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import SERVICE, Pki
from tools.local_services.process import KEYSTONE_VENV, Service, free_port
from tools.local_services.templates import Template

DOMAIN = "Default"
# A template (templates.py) is bootstrapped with this URL and a random admin password of
# its own, kept beside it; a Keystone started from it points its endpoints at its own URL
# and sets its admin's password through the API (`KeystoneServer._adopt_template`).
TEMPLATE_URL = "http://template.invalid/v3"
TEMPLATE_PASSWORD = "template-admin-password"
TOKEN_EXPIRATION = 3600


def config_text(run_dir: Path, token_expiration: int = TOKEN_EXPIRATION) -> str:
    """keystone.conf, every file under `run_dir`."""
    keys = run_dir / "fernet-keys"
    return (
        "[DEFAULT]\n"
        "debug = False\n"
        "[database]\n"
        f"connection = sqlite:///{run_dir / 'keystone.sqlite'}\n"
        # Receipts default to /etc/keystone: fernet_setup would write there too.
        f"[fernet_tokens]\nkey_repository = {keys}\n"
        f"[fernet_receipts]\nkey_repository = {keys}\n"
        f"[credential]\nkey_repository = {run_dir / 'credential-keys'}\n"
        f"[token]\nexpiration = {token_expiration}\n"
        # A local Keystone: cheap password hashes (bcrypt's default costs ~0.3 s a login).
        "[identity]\npassword_hash_rounds = 4\n"
        # Keystone's own cache, in its one process (a write, a revocation among them,
        # invalidates what it read): a token's validation took 34 ms of CPU here without
        # it, 2.2 ms with it, and a login 45 ms, 9 ms.
        "[cache]\nenabled = true\nbackend = oslo_cache.dict\nexpiration_time = 600\n"
    )


def fernet_key_repository(path: Path) -> None:
    """What `keystone-manage fernet_setup` and `credential_setup` make, without the ~2 s of
    CPU each spends importing Keystone (keystone/common/fernet_utils.py): a 0700 directory
    holding a staged key `0` and a primary key `1`, each a Fernet key (32 random bytes,
    urlsafe base64) alone in a 0600 file. One that has a key 0 is left as it is (so does
    Keystone)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if (path / "0").exists():
        return
    for name in ("1", "0"):  # the staged key last: its presence says "set up"
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(Fernet.generate_key())


def _manage(conf: Path, log_dir: Path, *commands: list[str]) -> None:
    """Run `keystone-manage` commands side by side (each spends seconds on imports)."""
    manage = KEYSTONE_VENV / "bin" / "keystone-manage"
    running = [(args[0], subprocess.Popen(
        [str(manage), "--config-file", str(conf), *args], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True))
        for args in commands]
    for command, process in running:
        output, _ = process.communicate()
        if process.returncode:
            # The whole output kept: its last line may be a usage line that says nothing.
            log = log_dir / f"keystone-manage-{command}.log"
            log.write_text(output)
            lines = output.strip().splitlines() or ["(no output)"]
            telling = [line for line in lines if "error" in line.lower()] or lines
            raise ServiceUnavailable(f"keystone-manage {command} failed (exit "
                                     f"{process.returncode}, {log}): {telling[-1][:200]}")


def _bootstrap(password: str, url: str) -> list[str]:
    # "--option=value": a random password may begin with "-" (1 start in 64), which
    # keystone-manage would read as an option and answer with its usage.
    return ["bootstrap", f"--bootstrap-password={password}",
            "--bootstrap-admin-url", url, "--bootstrap-public-url", url,
            "--bootstrap-internal-url", url, "--bootstrap-region-id", "RegionOne"]


def _build_template(directory: Path) -> None:
    """keystone.sqlite as db_sync and bootstrap leave it (admin password: random, kept in
    `TEMPLATE_PASSWORD`, 0600; endpoints: `TEMPLATE_URL`), made in a scratch run directory."""
    password = secrets.token_urlsafe(18)
    with tempfile.TemporaryDirectory(prefix="keystone-template-") as scratch:
        run_dir = Path(scratch)
        conf = run_dir / "keystone.conf"
        conf.write_text(config_text(run_dir))
        fernet_key_repository(run_dir / "fernet-keys")  # bootstrap wants them there
        fernet_key_repository(run_dir / "credential-keys")
        _manage(conf, run_dir, ["db_sync"])
        _manage(conf, run_dir, _bootstrap(password, TEMPLATE_URL))
        shutil.move(run_dir / "keystone.sqlite", directory / "keystone.sqlite")
    fd = os.open(directory / TEMPLATE_PASSWORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password)


def template() -> Template:
    """Keystone's template: this virtualenv's, made by this config and these commands."""
    recipe = json.dumps([config_text(Path("/run-dir")), ["db_sync"],
                         _bootstrap("(random)", TEMPLATE_URL)])
    return Template("keystone", KEYSTONE_VENV, recipe)


class KeystoneServer(Service):
    """Keystone's public API (v3) on loopback; `admin` is bootstrapped with `admin_password`.

    Passwords (the admin's and those `password(user)` hands out) are made once, at random,
    and kept in `passwords.json` (0600) in the run directory, so a Keystone started again
    from a saved state (`make up` twice) knows them.
    """

    pki: Pki | None = None
    _admin: Any = None

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None, pki: Pki | None = None,
               address: str = "127.0.0.1") -> KeystoneServer:
        """`address`: where clients reach it (one started elsewhere: docker.sh's)."""
        server = cls("keystone", run_dir, port or free_port(), extra={"address": address})
        server.pki = pki
        return server

    def service_port(self, kind: str) -> int:
        """The port for every server of service `kind` this Keystone's catalog names in
        turn (tests start one compute API after another on one Keystone): picked once, so
        the catalog's URL never moves. A client that read the catalog keeps it for its
        token's life: Neutron's Nova notifier sent a later module's network-vif-plugged to
        the stopped API of an earlier one, and that module's ports were never up."""
        key = f"{kind}_port"
        if key not in self.extra:
            self.extra[key] = str(free_port())
        return int(self.extra[key])

    @property
    def auth_url(self) -> str:
        address = self.extra.get("address", "127.0.0.1")
        return f"{'https' if self.pki else 'http'}://{address}:{self.port}/v3"

    @property
    def ca_file(self) -> str | None:
        """The CA that signed Keystone's certificate (None: plain HTTP)."""
        return str(self.pki.ca_cert) if self.pki else None

    @property
    def verify(self) -> str | bool:
        return self.ca_file or True

    @property
    def conf(self) -> Path:
        return self.run_dir / "keystone.conf"

    # --- passwords ------------------------------------------------------------------

    @property
    def _passwords_file(self) -> Path:
        return self.run_dir / "passwords.json"

    def password(self, user: str) -> str:
        """The password of `user` in this Keystone (made now if it has none yet)."""
        known: dict[str, str] = {}
        if self._passwords_file.exists():
            known = json.loads(self._passwords_file.read_text())
        if user not in known:
            known[user] = secrets.token_urlsafe(18)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._passwords_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(known, handle)
        return known[user]

    @property
    def admin_password(self) -> str:
        return self.password("admin")

    # --- start ----------------------------------------------------------------------

    def _write_config(self, token_expiration: int) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(config_text(self.run_dir, token_expiration))
        # Keystone's config parser reads the process's argv: gunicorn's own options would be
        # refused as unknown, so gunicorn takes them from this file and the environment.
        (self.run_dir / "gunicorn.conf.py").write_text(
            'wsgi_app = "keystone.wsgi.api:application"\n')

    def _from_template(self) -> str | None:
        """A new run directory's database copied from the template; the template's admin
        password (None: no template, or a database already here: run keystone-manage)."""
        database, kept = self.run_dir / "keystone.sqlite", self.run_dir / TEMPLATE_PASSWORD
        if database.exists():
            return None  # a Keystone started again from its saved state (make up)
        if not template().copy(_build_template,
                               {"keystone.sqlite": database, TEMPLATE_PASSWORD: kept}):
            return None
        password = kept.read_text()
        kept.unlink()
        return password

    def start(self, token_expiration: int = TOKEN_EXPIRATION) -> KeystoneServer:
        gunicorn = KEYSTONE_VENV / "bin" / "gunicorn"
        if not gunicorn.exists() or not (KEYSTONE_VENV / "bin" / "keystone-manage").exists():
            raise ServiceUnavailable(f"Keystone is not installed in {KEYSTONE_VENV}; "
                                     "run: make install")
        self._write_config(token_expiration)
        template_password = self._from_template()
        # Each Keystone's own keys, also when its database is the template's: a token of
        # one test Keystone means nothing to another (their ids are the same).
        fernet_key_repository(self.run_dir / "fernet-keys")
        fernet_key_repository(self.run_dir / "credential-keys")
        if template_password is None:
            _manage(self.conf, self.run_dir, ["db_sync"])
        tls = ""
        if self.pki:
            issued = self.pki.issue("keystone", SERVICE, ips=["127.0.0.1"], dns=["localhost"])
            tls = f" --certfile {issued.cert} --keyfile {issued.key}"

        def start_once() -> None:
            self._spawn([str(gunicorn)], env={
                "OS_KEYSTONE_CONFIG_FILES": str(self.conf),
                "GUNICORN_CMD_ARGS": (f"--bind 127.0.0.1:{self.port} --workers 1 "
                                      "--no-control-socket --timeout 120"
                                      f"{tls} --config {self.run_dir / 'gunicorn.conf.py'}"),
            })
            self._wait_healthy(self.auth_url, 60, self.verify)  # /v3 answers unbootstrapped

        self.start_on_a_free_port(start_once)
        # Bootstrapped (or the template's bootstrap adopted) once it listens: the endpoints
        # name the port it got.
        if template_password is None:
            _manage(self.conf, self.run_dir, _bootstrap(self.admin_password, self.auth_url))
        else:
            self._adopt_template(template_password)
        return self

    def _adopt_template(self, template_password: str) -> None:
        """What `bootstrap` here would change in the template's database, through the API
        as its admin: the identity endpoints name this Keystone, the admin has this run
        directory's password."""
        admin = self.session(password=template_password)
        for endpoint in self._api("GET", "/endpoints", auth=admin)["endpoints"]:
            if endpoint["url"] == TEMPLATE_URL:
                self._api("PATCH", f"/endpoints/{endpoint['id']}",
                          {"endpoint": {"url": self.auth_url}}, auth=admin)
        self._api("PATCH", f"/users/{admin.get_user_id()}",
                  {"user": {"password": self.admin_password}}, auth=admin)
        self._admin = None
        # The new password revokes the admin's tokens issued up to this second (revocation
        # events and Fernet tokens count whole seconds): the next one must be of a later one.
        time.sleep(1.01 - time.time() % 1)

    # --- identities, through the API as the bootstrapped admin --------------------

    def session(self, username: str = "admin", password: str | None = None,
                project: str = "admin") -> Any:
        """A keystoneauth1 session authenticated as `username` (the admin by default)."""
        from keystoneauth1 import session
        from keystoneauth1.identity import v3

        auth = v3.Password(auth_url=self.auth_url, username=username,
                           password=password or self.password(username), project_name=project,
                           user_domain_name=DOMAIN, project_domain_name=DOMAIN)
        return session.Session(auth=auth, timeout=30, verify=self.verify)

    def _admin_session(self) -> Any:
        """The admin's session, made once: it keeps its token until that nears its expiry
        (a session per call logged in again for each of the bootstrap's ~50 calls)."""
        if self._admin is None:
            self._admin = self.session()
        return self._admin

    def _api(self, method: str, path: str, json: Any = None,
             auth: Any = None) -> dict[str, Any]:
        response = (auth or self._admin_session()).request(
            self.auth_url + path, method, json=json, raise_exc=True)
        return response.json() if response.content else {}

    def _find(self, kind: str, name: str, **filters: str) -> str | None:
        query = "&".join(f"{key}={value}" for key, value in {"name": name, **filters}.items())
        found = self._api("GET", f"/{kind}?{query}")[kind]
        return found[0]["id"] if found else None

    def _ensure(self, kind: str, name: str, body: dict[str, Any]) -> str:
        existing = self._find(kind, name)
        if existing:
            return existing
        singular = kind[:-1]
        return self._api("POST", f"/{kind}", {singular: {"name": name, **body}})[singular]["id"]

    def add_project(self, name: str) -> str:
        return self._ensure("projects", name, {"domain_id": "default"})

    def add_user(self, name: str, password: str | None, project: str, role: str) -> str:
        """User `name` with `role` on `project` (all three made if missing); returns its id.
        `password` None: the one `password(name)` keeps."""
        project_id = self.add_project(project)
        role_id = self._ensure("roles", role, {})
        user_id = self._ensure("users", name, {
            "domain_id": "default", "password": password or self.password(name),
            "default_project_id": project_id})
        self._api("PUT", f"/projects/{project_id}/users/{user_id}/roles/{role_id}")
        return user_id

    def add_service(self, kind: str, name: str, url: str) -> None:
        """A catalog entry: service `name` of type `kind` at `url` (public, internal and
        admin interfaces, RegionOne); an endpoint already there is pointed at `url`."""
        service_id = self._find("services", name) or self._api("POST", "/services", {
            "service": {"type": kind, "name": name}})["service"]["id"]
        existing = self._api("GET", f"/endpoints?service_id={service_id}")["endpoints"]
        for interface in ("public", "internal", "admin"):
            mine = [e for e in existing if e["interface"] == interface]
            if mine and mine[0]["url"] == url:
                continue
            if mine:
                self._api("PATCH", f"/endpoints/{mine[0]['id']}", {"endpoint": {"url": url}})
            else:
                self._api("POST", "/endpoints", {"endpoint": {
                    "service_id": service_id, "interface": interface, "url": url,
                    "region_id": "RegionOne"}})

    def remove_service(self, name: str) -> None:
        """The catalog entry of service `name` and its endpoints removed (none: nothing)."""
        service_id = self._find("services", name)
        if service_id is None:
            return
        for endpoint in self._api("GET", f"/endpoints?service_id={service_id}")["endpoints"]:
            self._api("DELETE", f"/endpoints/{endpoint['id']}")
        self._api("DELETE", f"/services/{service_id}")

    def add_application_credential(self, user: str, password: str,
                                   project: str) -> tuple[str, str]:
        """An application credential of `user` on `project`: (id, secret)."""
        session = self.session(user, password, project)
        user_id = session.get_user_id()
        made = self._api("POST", f"/users/{user_id}/application_credentials",
                         {"application_credential": {"name": f"{user}-app"}}, auth=session)
        credential = made["application_credential"]
        return credential["id"], credential["secret"]

    def client_section(self, username: str, password: str | None = None,
                       project: str = "admin") -> dict[str, Any]:
        """A `keystone` config section for that user (password auth), as our clients read it
        (`placement.keystone`, `glance.keystone`)."""
        return {"auth_url": self.auth_url, "username": username,
                "password": password or self.password(username),
                "project_name": project, "user_domain_name": DOMAIN,
                "project_domain_name": DOMAIN}
