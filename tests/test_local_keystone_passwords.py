"""The local Keystone (tools/local_services/keystone.py) bootstraps whatever random admin
password it drew: one beginning with "-" (1 start in 64) was read by keystone-manage as an
option, and the start failed with its usage (a Tempest smoke run's cloud, once). A new run
directory's Keystone starts from the template (templates.py) and gets its password through
the API; one started again from its saved state (make up) is bootstrapped with it."""

from __future__ import annotations

import json
import uuid

from tests.support import unavailable
from tools.local_services.keystone import KEYSTONE_VENV, KeystoneServer
from tools.local_services.process import free_port


def test_an_admin_password_beginning_with_a_dash_bootstraps(tmp_path):
    if not (KEYSTONE_VENV / "bin" / "keystone-manage").exists():
        unavailable(f"Keystone is not installed in {KEYSTONE_VENV} (make install)")
    run_dir = tmp_path / "keystone"
    run_dir.mkdir()
    password = f"-{uuid.uuid4().hex}"
    (run_dir / "passwords.json").write_text(json.dumps({"admin": password}))
    server = KeystoneServer.create(run_dir)
    try:
        server.start()  # a new run directory: the template's admin, given it through the API
        assert server.admin_password == password
        assert server.session().get_token()
        server.stop()
        # Started again from its saved state (make up), elsewhere: keystone-manage bootstrap
        # with that password, and the catalog moved to its new port.
        first = server.port
        server.port = next(port for port in iter(free_port, None) if port != first)
        server.start()
        session = server.session()
        catalog = session.auth.get_access(session).service_catalog.catalog
        assert {e["url"] for s in catalog for e in s["endpoints"]} == {server.auth_url}
    finally:
        server.stop()
