"""A server's console URL through the real compute API (gunicorn, Keystone's tokens) and
`openstack console url show`: the owner gets a noVNC URL whose single-use token etcd keeps
as a hash for that server; another project sees no server (404, as Nova); a reader may
not (403); the consoles we do not serve are Nova's 400s; a host without a console relay
(the fake driver's) says so truthfully ("Unavailable console type novnc.").

The hosts here are fake-driver computes (no screens); that the token opens a real guest's
screen through the real proxy: tests/virt/test_remote_console_vm.py. In the "cloud"
worker group (Keystone: `openstack_cloud`), as every test of tests/api.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib import parse

import pytest

from etcd_compute import messages, remote_consoles
from etcd_compute.hosts import publish_console_address
from etcd_compute.pki import Pki
from tests.api.conftest import IMAGE, Cloud
from tests.network.neutron import OPENSTACK
from tests.openstack_shell import OpenStackShells
from tools.local_services import KeystoneServer
from tools.local_services import cloud as local_cloud

BASE_URL = "https://console.example:6080/vnc_lite.html"


def cloud_config(_keystone: KeystoneServer, _pki: Pki) -> dict[str, Any]:
    return {"console": {"base_url": BASE_URL, "token_ttl_seconds": 120}}


@pytest.fixture(scope="module")
def server(cloud: Cloud) -> Iterator[Any]:
    demo = cloud.connect("demo")
    made = demo.compute.create_server(name="screen", flavor_id="1", image_id=IMAGE,
                                      networks="auto")
    made = demo.compute.wait_for_server(made, status="ACTIVE", wait=60, interval=0.3)
    yield made
    demo.compute.delete_server(made.id)
    demo.compute.wait_for_delete(made, wait=60)


@pytest.fixture(scope="module")
def shells(cloud: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenStackShells]:
    clouds = local_cloud.write_clouds_yaml(cloud.keystone,
                                           tmp_path_factory.mktemp("clients") / "clouds.yaml")
    shells = OpenStackShells(OPENSTACK.parent / "python",
                             {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})
    yield shells
    shells.close()


def remote(cloud: Cloud, server_id: str, body: dict[str, Any], user: str = "demo",
           version: str = "2.6") -> Any:
    return cloud.session(user).post(
        f"{cloud.api.endpoint}/servers/{server_id}/remote-consoles", json=body,
        headers={"OpenStack-API-Version": f"compute {version}"}, raise_exc=False)


def token_in(url: str) -> str:
    path = parse.parse_qs(parse.urlsplit(url).query)["path"][0]
    return parse.parse_qs(parse.urlsplit(path).query)["token"][0]


def test_a_host_without_a_relay_has_no_console_to_give(cloud: Cloud, server: Any,
                                                       shells: OpenStackShells) -> None:
    answer = remote(cloud, server.id, {"remote_console": {"protocol": "vnc", "type": "novnc"}})
    assert answer.status_code == 400
    assert answer.json()["badRequest"]["message"] == "Unavailable console type novnc."
    done = shells.run("etcd-compute-demo", "console", "url", "show", server.id, timeout=120)
    assert done.returncode != 0
    assert "Unavailable console type novnc." in done.stderr


def test_the_owner_gets_a_novnc_url_through_the_api_and_openstackclient(
        cloud: Cloud, server: Any, shells: OpenStackShells) -> None:
    # The fake host publishes no relay; this test's host says it has one (the proxy is not
    # asked here: only the API's answer and its token are).
    publish_console_address(cloud.store, cloud.host, "192.0.2.10:6081")
    try:
        answer = remote(cloud, server.id,
                        {"remote_console": {"protocol": "vnc", "type": "novnc"}})
        assert answer.status_code == 200, answer.text
        console = answer.json()["remote_console"]
        assert (console["protocol"], console["type"]) == ("vnc", "novnc")
        assert console["url"].startswith(BASE_URL + "?path=%3Ftoken%3D")
        token = token_in(console["url"])
        entry = cloud.store.get(cloud.store.keys.console_token(remote_consoles.digest(token)))
        assert entry is not None and token.encode() not in entry.value
        assert messages.decode(messages.CONSOLE_TOKEN, entry.value)["instance_uuid"] == \
            server.id

        done = shells.run("etcd-compute-demo", "console", "url", "show", server.id, "-f",
                          "json", timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        shown = json.loads(done.stdout)
        assert shown["type"] == "novnc" and shown["url"].startswith(BASE_URL)
        assert token_in(shown["url"]) != token  # a new token each time
        # The old action, as openstackclient sends it below 2.6.
        done = shells.run("etcd-compute-demo", "--os-compute-api-version", "2.1", "console",
                          "url", "show", server.id, "-f", "json", timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout)["url"].startswith(BASE_URL)

        # Another project's server does not exist for its members; its console neither.
        answer = remote(cloud, server.id,
                        {"remote_console": {"protocol": "vnc", "type": "novnc"}}, user="alt")
        assert answer.status_code == 404
        done = shells.run("etcd-compute-alt", "console", "url", "show", server.id,
                          timeout=120)
        assert done.returncode != 0
        # What we do not serve: Nova's 400s.
        for protocol, console_type, message in (
                ("spice", "spice-html5", "Unavailable console type spice-html5."),
                ("serial", "serial", "Unavailable console type serial."),
                ("rdp", "rdp-html5", "Unavailable console type rdp."),
                ("vnc", "xvpvnc", "Invalid console type xvpvnc")):
            answer = remote(cloud, server.id, {"remote_console": {
                "protocol": protocol, "type": console_type}})
            assert (answer.status_code, answer.json()["badRequest"]["message"]) == (
                400, message)
        done = shells.run("etcd-compute-demo", "console", "url", "show", "--spice",
                          server.id, timeout=120)
        assert done.returncode != 0 and "Unavailable console type spice-html5." in done.stderr
    finally:
        publish_console_address(cloud.store, cloud.host, None)


def test_nothing_is_kept_but_hashes(cloud: Cloud) -> None:
    entries, _ = cloud.store.get_prefix(cloud.store.keys.console_tokens())
    for entry in entries:
        assert len(entry.key.rsplit("/", 1)[1]) == 64 and entry.lease

