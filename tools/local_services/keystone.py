"""Keystone under gunicorn in its own virtualenv, on SQLite (for the tests of Placement
behind Keystone: sites that already run one authenticate with it instead of certificates).

Set up as its install guide does (`keystone-manage db_sync`, `fernet_setup`,
`credential_setup`, `bootstrap`), with every file under the run directory; users,
projects and application credentials are then made through its API as the admin.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import KEYSTONE_VENV, Service, free_port

DOMAIN = "Default"


class KeystoneServer(Service):
    """Keystone's public API (v3) on loopback; `admin` with `admin_password` is bootstrapped."""

    admin_password = "keystone-admin-secret"

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> KeystoneServer:
        return cls("keystone", run_dir, port or free_port())

    @property
    def auth_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v3"

    @property
    def conf(self) -> Path:
        return self.run_dir / "keystone.conf"

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
            # A test Keystone: cheap password hashes (bcrypt's default costs ~0.3 s a login).
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
                lines = output.strip().splitlines() or ["(no output)"]
                raise ServiceUnavailable(f"keystone-manage {command} failed: "
                                         f"{lines[-1][:200]}")

    def start(self, token_expiration: int = 3600) -> KeystoneServer:
        gunicorn = KEYSTONE_VENV / "bin" / "gunicorn"
        if not gunicorn.exists() or not (KEYSTONE_VENV / "bin" / "keystone-manage").exists():
            raise ServiceUnavailable(f"Keystone is not installed in {KEYSTONE_VENV}; "
                                     "run: make install")
        self._write_config(token_expiration)
        owner = ["--keystone-user", "root", "--keystone-group", "root"]
        self._manage(["db_sync"], ["fernet_setup", *owner], ["credential_setup", *owner])
        self._manage(["bootstrap", "--bootstrap-password", self.admin_password,
                      "--bootstrap-admin-url", self.auth_url,
                      "--bootstrap-public-url", self.auth_url,
                      "--bootstrap-internal-url", self.auth_url,
                      "--bootstrap-region-id", "RegionOne"])
        self._spawn([str(gunicorn)], env={
            "OS_KEYSTONE_CONFIG_FILES": str(self.conf),
            "GUNICORN_CMD_ARGS": (f"--bind 127.0.0.1:{self.port} --workers 1 "
                                  "--no-control-socket --timeout 120 "
                                  f"--config {self.run_dir / 'gunicorn.conf.py'}"),
        })
        self._wait_healthy(self.auth_url, 60)
        return self

    # --- identities, through the API as the bootstrapped admin --------------------

    def session(self, username: str = "admin", password: str | None = None,
                project: str = "admin") -> Any:
        """A keystoneauth1 session authenticated as `username` (the admin by default)."""
        from keystoneauth1 import session
        from keystoneauth1.identity import v3

        auth = v3.Password(auth_url=self.auth_url, username=username,
                           password=password or self.admin_password, project_name=project,
                           user_domain_name=DOMAIN, project_domain_name=DOMAIN)
        return session.Session(auth=auth, timeout=30)

    def _api(self, method: str, path: str, json: Any = None,
             auth: Any = None) -> dict[str, Any]:
        response = (auth or self.session()).request(
            self.auth_url + path, method, json=json, raise_exc=True)
        return response.json() if response.content else {}

    def _find(self, kind: str, name: str) -> str | None:
        found = self._api("GET", f"/{kind}?name={name}")[kind]
        return found[0]["id"] if found else None

    def _ensure(self, kind: str, name: str, body: dict[str, Any]) -> str:
        existing = self._find(kind, name)
        if existing:
            return existing
        singular = kind[:-1]
        return self._api("POST", f"/{kind}", {singular: {"name": name, **body}})[singular]["id"]

    def add_user(self, name: str, password: str, project: str, role: str) -> str:
        """User `name` with `role` on `project` (both made if missing); returns its id."""
        project_id = self._ensure("projects", project, {"domain_id": "default"})
        role_id = self._ensure("roles", role, {})
        user_id = self._ensure("users", name, {"domain_id": "default", "password": password,
                                               "default_project_id": project_id})
        self._api("PUT", f"/projects/{project_id}/users/{user_id}/roles/{role_id}")
        return user_id

    def add_application_credential(self, user: str, password: str,
                                   project: str) -> tuple[str, str]:
        """An application credential of `user` on `project`: (id, secret)."""
        session = self.session(user, password, project)
        user_id = session.get_user_id()
        made = self._api("POST", f"/users/{user_id}/application_credentials",
                         {"application_credential": {"name": f"{user}-app"}}, auth=session)
        credential = made["application_credential"]
        return credential["id"], credential["secret"]

    def add_endpoint(self, service_type: str, name: str, url: str) -> str:
        """A service of `service_type` in the catalog with its public endpoint `url` (the
        one there before is replaced: a test's API listens on a new port); its id."""
        services = self._api("GET", f"/services?type={service_type}")["services"]
        for service in services:
            self._api("DELETE", f"/services/{service['id']}")
        service_id = self._api("POST", "/services", {"service": {
            "type": service_type, "name": name, "enabled": True}})["service"]["id"]
        self._api("POST", "/endpoints", {"endpoint": {
            "service_id": service_id, "interface": "public", "url": url,
            "region_id": "RegionOne", "enabled": True}})
        return service_id

    def client_section(self, username: str, password: str, project: str) -> dict[str, Any]:
        """A `placement.keystone` config section for that user (password auth)."""
        return {"auth_url": self.auth_url, "username": username, "password": password,
                "project_name": project, "user_domain_name": DOMAIN,
                "project_domain_name": DOMAIN}
