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
        server.start()  # started again from its saved state: keystone-manage bootstrap
        assert server.session().get_token()
    finally:
        server.stop()
