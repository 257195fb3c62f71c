"""An expired token is 401 (keystonemiddleware checks its expiry, cached or not): a
Keystone whose tokens last 5 s and an API behind it, for this module only."""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Iterator

import pytest
import requests

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.pki import Pki
from tests.conftest import OPERATOR_USER
from tests.support import running
from tools.local_services import EtcdServer, KeystoneServer, PlacementServer
from tools.local_services.compute_api import ComputeApiServer

LIFETIME = 5


@pytest.fixture(scope="module")
def short_keystone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeystoneServer]:
    server = KeystoneServer.create(tmp_path_factory.mktemp("keystone-short"))
    with running(server, lambda: server.start(token_expiration=LIFETIME)):
        server.add_user("demo", "demo-secret", "demo", "member")
        server.add_user("etcd-compute", "service-secret", "service", "service")
        yield server


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory, etcd_server: EtcdServer,
        placement_server: PlacementServer, cluster_pki: Pki,
        short_keystone: KeystoneServer) -> Iterator[ComputeApiServer]:
    prefix = f"/api-{uuidlib.uuid4().hex[:12]}"
    config = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "etcd": etcd_server.client_config(prefix, OPERATOR_USER),
        "placement": placement_server.client_config(OPERATOR_USER),
        "api": {"workers": 1, "threads": 2, "keystone_authtoken": {
            **short_keystone.client_section("etcd-compute", "service-secret", "service"),
            "auth_type": "password"}}})
    server = ComputeApiServer.create(tmp_path_factory.mktemp("api-short"), pki=cluster_pki)
    server.start(config)
    yield server
    server.stop()


def test_an_expired_token_is_401(api: ComputeApiServer, short_keystone: KeystoneServer,
                                 cluster_pki: Pki) -> None:
    token = short_keystone.session("demo", "demo-secret", "demo").get_token()
    url, ca = api.endpoint + "/servers", str(cluster_pki.ca_cert)
    fresh = requests.get(url, headers={"X-Auth-Token": token}, verify=ca, timeout=30)
    assert fresh.status_code == 200 and fresh.json() == {"servers": []}
    time.sleep(LIFETIME + 1)
    expired = requests.get(url, headers={"X-Auth-Token": token}, verify=ca, timeout=30)
    assert expired.status_code == 401
    assert expired.json()["error"]["code"] == 401
