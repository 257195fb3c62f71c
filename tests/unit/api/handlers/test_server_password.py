"""os-server-password: never a password here; Nova's answers for a server without one."""

from __future__ import annotations

from tests.unit.api.harness import Harness, active


def test_a_server_has_no_password_and_clearing_it_is_204(harness: Harness):
    uuid = active(harness)
    path = f"/v2.1/servers/{uuid}/os-server-password"
    assert harness.call("GET", path).json == {"password": ""}
    assert harness.call("DELETE", path).status_int == 204
    assert harness.call("GET", path, project="p2").status_int == 404
    assert harness.call("DELETE", path, roles=("reader",)).status_int == 403
    assert harness.call("GET", "/v2.1/servers/" + "0" * 32 + "/os-server-password"
                        ).status_int == 404
