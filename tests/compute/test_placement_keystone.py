"""Placement behind a real Keystone: hosts and operators authenticate with keystoneauth1.

The session's Keystone (TLS, SQLite) and a second Placement with `auth_strategy =
keystone` (for this module only) beside the session's etcd. A compute registers its provider and
schedule.py places an instance with a password and with an application credential;
a wrong password is refused in one line with nothing claimed; a revoked token is
replaced without the caller noticing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import config as configuration
from etcd_compute import defaults
from etcd_compute.placement import PlacementClient
from tests.compute.helpers import wait_state
from tests.support import run_cli, running, wait_for
from tools.local_services import KeystoneServer, PlacementServer

PROJECT = "etcd-compute"
OPERATOR, OPERATOR_PASSWORD = "operator", "operator-secret"
HOST, HOST_PASSWORD = "compute-host", "compute-host-secret"
QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"


@pytest.fixture(scope="module")
def keystone(keystone_server: KeystoneServer) -> KeystoneServer:
    # The `service` role is what Placement's policy asks of Nova.
    keystone_server.add_user(OPERATOR, OPERATOR_PASSWORD, PROJECT, "service")
    keystone_server.add_user(HOST, HOST_PASSWORD, PROJECT, "service")
    return keystone_server


@pytest.fixture(scope="module")
def placement_server_keystone(tmp_path_factory: pytest.TempPathFactory,
                              keystone: KeystoneServer) -> Iterator[PlacementServer]:
    with running(PlacementServer.create(tmp_path_factory.mktemp("placement-keystone"),
                                        keystone=keystone)) as server:
        yield server


@pytest.fixture
def with_keystone(placement_server_keystone: PlacementServer
                  ) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A `placement:` section for Placement behind Keystone with `section` as credentials
    (no certificate, and a noauth token Placement would refuse)."""

    def section(credentials: dict[str, Any]) -> dict[str, Any]:
        return {**defaults.PLACEMENT_DEFAULTS, "endpoint": placement_server_keystone.endpoint,
                "token": "not-a-keystone-token", "keystone": credentials,
                # Verifies Keystone (TLS with the cluster CA); this Placement is plain HTTP.
                "ca_cert": placement_server_keystone.keystone.ca_file}

    return section


@pytest.fixture
def operator_placement(keystone: KeystoneServer, with_keystone: Callable[..., dict[str, Any]]
                       ) -> Iterator[PlacementClient]:
    """The tests' own client, as the operator; every provider is removed afterwards."""
    client = PlacementClient(with_keystone(
        keystone.client_section(OPERATOR, OPERATOR_PASSWORD, PROJECT)))
    yield client
    for provider in client.list_providers():
        for consumer in client.get(f"/resource_providers/{provider['uuid']}/allocations")[
                "allocations"]:
            client.delete_allocations(consumer)
        client.delete_provider(provider["uuid"])


def compute_with(compute_config: dict[str, Any], placement: dict[str, Any]) -> dict[str, Any]:
    config = {**compute_config, "placement": placement}
    configuration.validate(config, "compute_config", "test compute config")
    return config


def schedule_yaml(schedule_config: dict[str, Any], placement: dict[str, Any],
                  write_yaml: Callable[[str, dict[str, Any]], Path]) -> Path:
    config = {**schedule_config, "placement": placement}
    configuration.validate(config, "schedule_config", "test schedule config")
    return write_yaml("schedule-keystone.yaml", config)


def registered(start_compute: Any, store: Any, config: dict[str, Any],
               placement: PlacementClient) -> Any:
    """A compute that has put its heartbeat and its provider with inventory in Placement."""
    compute = start_compute(config)
    rp = config["compute"]["uuid"]
    wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="heartbeat")
    wait_for(lambda: placement.get_provider(rp), 30, what="provider in Placement")
    inventory = placement.get(f"/resource_providers/{rp}/inventories")["inventories"]
    assert inventory["MEMORY_MB"]["total"] == 2048, compute.log()
    return compute


def placed(config_path: Path, rp: str, placement: PlacementClient, store: Any) -> str:
    run = run_cli("schedule.py", "--config", str(config_path), QUERY)
    assert run.code == 0, run.stderr
    found = re.search(r"^NOTIFIED TARGET, (\S+), OF INSTANCE (\S+)$", run.stdout, re.M)
    assert found and found.group(1) == rp, run.stdout
    uuid = found.group(2)
    wait_state(store, uuid, "ACTIVE")
    claimed = placement.get_allocations(uuid)["allocations"]
    assert {host: held["resources"] for host, held in claimed.items()} == {
        rp: {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}
    return uuid


def test_a_host_registers_and_schedule_places_with_keystone_passwords(
        keystone, with_keystone, operator_placement, compute_config, schedule_config,
        start_compute, store, write_yaml):
    host = compute_with(compute_config, with_keystone(
        keystone.client_section(HOST, HOST_PASSWORD, PROJECT)))
    registered(start_compute, store, host, operator_placement)
    operator = with_keystone(keystone.client_section(OPERATOR, OPERATOR_PASSWORD, PROJECT))
    placed(schedule_yaml(schedule_config, operator, write_yaml), host["compute"]["uuid"],
           operator_placement, store)


def test_application_credentials_register_and_place(
        keystone, with_keystone, operator_placement, compute_config, schedule_config,
        start_compute, store, write_yaml):
    def application_credential(user: str, password: str) -> dict[str, Any]:
        credential_id, secret = keystone.add_application_credential(user, password, PROJECT)
        return {"auth_url": keystone.auth_url, "application_credential_id": credential_id,
                "application_credential_secret": secret}

    host = compute_with(compute_config,
                        with_keystone(application_credential(HOST, HOST_PASSWORD)))
    registered(start_compute, store, host, operator_placement)
    operator = with_keystone(application_credential(OPERATOR, OPERATOR_PASSWORD))
    placed(schedule_yaml(schedule_config, operator, write_yaml), host["compute"]["uuid"],
           operator_placement, store)


def test_a_wrong_password_fails_in_one_line_and_claims_nothing(
        keystone, with_keystone, operator_placement, compute_config, schedule_config,
        start_compute, store, write_yaml):
    host = compute_with(compute_config, with_keystone(
        keystone.client_section(HOST, HOST_PASSWORD, PROJECT)))
    registered(start_compute, store, host, operator_placement)
    wrong = with_keystone(keystone.client_section(OPERATOR, "not-the-password", PROJECT))
    run = run_cli("schedule.py", "--config",
                  str(schedule_yaml(schedule_config, wrong, write_yaml)), QUERY)
    assert run.code != 0, run.stdout
    assert run.stderr.strip().count("\n") == 0, run.stderr
    assert "Keystone refused our credentials (placement.keystone)" in run.stderr
    rp = host["compute"]["uuid"]
    assert operator_placement.get(f"/resource_providers/{rp}/allocations")["allocations"] == {}
    assert store.get_prefix(store.keys.specs(rp))[0] == []


def test_a_revoked_token_is_replaced_and_the_request_goes_through(
        keystone, with_keystone, operator_placement):
    client = PlacementClient(with_keystone(
        keystone.client_section(OPERATOR, OPERATOR_PASSWORD, PROJECT)))
    client.list_providers()
    first = client.request("GET", "/").request.headers["x-auth-token"]
    admin = keystone.session()
    admin.delete(keystone.auth_url + "/auth/tokens", headers={"X-Subject-Token": first})
    assert admin.get(keystone.auth_url + "/auth/tokens", headers={"X-Subject-Token": first},
                     raise_exc=False).status_code == 404
    assert client.list_providers() == []
    assert client.request("GET", "/").request.headers["x-auth-token"] != first
