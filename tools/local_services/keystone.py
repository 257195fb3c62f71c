"""Keystone under gunicorn in its own virtualenv, on SQLite: the identity service of `make up`,
`make demo` and the tests (Glance and, where asked, Placement validate its tokens).

Set up as its install guide does (`keystone-manage db_sync`, `fernet_setup`,
`credential_setup`, `bootstrap`), with every file under the run directory; projects, users
and the service catalog are then made through its API as the admin (`cloud.py`). With a
`Pki` it serves TLS with a certificate of the cluster CA (clients verify it with the CA;
they authenticate with passwords, not certificates). Loopback only.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.pki import SERVICE, Pki
from tools.local_services.process import KEYSTONE_VENV, Service, free_port

DOMAIN = "Default"


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
        keys = self.run_dir / "fernet-keys"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            "[DEFAULT]\n"
            "debug = False\n"
            "[database]\n"
            f"connection = sqlite:///{self.run_dir / 'keystone.sqlite'}\n"
            # Receipts default to /etc/keystone: fernet_setup would write there too.
            f"[fernet_tokens]\nkey_repository = {keys}\n"
            f"[fernet_receipts]\nkey_repository = {keys}\n"
            f"[credential]\nkey_repository = {self.run_dir / 'credential-keys'}\n"
            f"[token]\nexpiration = {token_expiration}\n"
            # A local Keystone: cheap password hashes (bcrypt's default costs ~0.3 s a login).
            "[identity]\npassword_hash_rounds = 4\n"
        )
        # Keystone's config parser reads the process's argv: gunicorn's own options would be
        # refused as unknown, so gunicorn takes them from this file and the environment.
        (self.run_dir / "gunicorn.conf.py").write_text(
            'wsgi_app = "keystone.wsgi.api:application"\n')

    def _manage(self, *commands: list[str]) -> None:
        """Run `keystone-manage` commands side by side (each spends seconds on imports)."""
        manage = KEYSTONE_VENV / "bin" / "keystone-manage"
        running = [(args[0], subprocess.Popen(
            [str(manage), "--config-file", str(self.conf), *args], stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True))
            for args in commands]
        for command, process in running:
            output, _ = process.communicate()
            if process.returncode:
                # The whole output kept: its last line may be a usage line that says nothing.
                log = self.run_dir / f"keystone-manage-{command}.log"
                log.write_text(output)
                lines = output.strip().splitlines() or ["(no output)"]
                telling = [line for line in lines if "error" in line.lower()] or lines
                raise ServiceUnavailable(f"keystone-manage {command} failed (exit "
                                         f"{process.returncode}, {log}): {telling[-1][:200]}")

    def start(self, token_expiration: int = 3600) -> KeystoneServer:
        gunicorn = KEYSTONE_VENV / "bin" / "gunicorn"
        if not gunicorn.exists() or not (KEYSTONE_VENV / "bin" / "keystone-manage").exists():
            raise ServiceUnavailable(f"Keystone is not installed in {KEYSTONE_VENV}; "
                                     "run: make install")
        self._write_config(token_expiration)
        owner = ["--keystone-user", "root", "--keystone-group", "root"]
        self._manage(["db_sync"], ["fernet_setup", *owner], ["credential_setup", *owner])
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
        # Bootstrapped once it listens: the endpoints it registers name the port it got.
        # "--option=value": a random password may begin with "-" (1 start in 64), which
        # keystone-manage would read as an option and answer with its usage.
        self._manage(["bootstrap", f"--bootstrap-password={self.admin_password}",
                      "--bootstrap-admin-url", self.auth_url,
                      "--bootstrap-public-url", self.auth_url,
                      "--bootstrap-internal-url", self.auth_url,
                      "--bootstrap-region-id", "RegionOne"])
        return self

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
