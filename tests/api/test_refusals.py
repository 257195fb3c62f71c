"""Hostile requests: each refused with Nova's status and error shape, nothing claimed,
nothing written (no server view, no reservation, no claim)."""

from __future__ import annotations

import base64
import json

import pytest
import requests

from tests.api.conftest import IMAGE, Cloud


def _create(cloud: Cloud, body: object, version: str | None = None,
            raw: bytes | None = None) -> requests.Response:
    headers = {"Content-Type": "application/json"}
    if version:
        headers["OpenStack-API-Version"] = f"compute {version}"
    data = raw if raw is not None else json.dumps(body).encode()
    return cloud.session("demo").post(cloud.api.endpoint + "/servers", data=data,
                                      headers=headers, raise_exc=False)


def _server(**fields: object) -> dict[str, object]:
    return {"server": {"name": "x", "flavorRef": "1", "imageRef": IMAGE, **fields}}


def _nothing_left(cloud: Cloud) -> None:
    """No server (not even one ended), no reservation, no claim: the module's first
    creates are refused ones, so not one /servers/ key may exist."""
    assert cloud.api_keys("servers") == []
    assert cloud.api_keys("quota-reservations") == []
    assert not cloud.usage("demo")


@pytest.mark.parametrize("body,raw,words", [
    (None, b"{not json", "Malformed request body"),
    (None, b"", "Malformed request body"),
    (None, b"[" * 10000 + b"]" * 10000, "Malformed request body"),
    ({"server": {"flavorRef": "1", "imageRef": IMAGE}}, None, "'name' is a required"),
    (_server(name="x" * 256), None, "Invalid input for field/attribute name"),
    (_server(name=" leading"), None, "Invalid input for field/attribute name"),
    (_server(admin=True), None, "Additional properties are not allowed"),
    (_server(metadata={"k": "v" * 256}), None, "Invalid input for field/attribute k"),
    (_server(min_count=0), None, "Invalid input for field/attribute min_count"),
    (_server(min_count=3, max_count=2), None, "min_count must be <= max_count"),
    (_server(flavorRef="404"), None, "Flavor 404 could not be found."),
    (_server(imageRef="gopher://x"), None, "Can not find requested image"),
    (_server(key_name="nokey"), None, "Invalid key_name provided."),
    (_server(availability_zone="moon"), None, "availability zone is not available"),
    (_server(networks=[{"uuid": "b9f3f5f0-6f1c-4f4e-9d6e-6a6a0e7e2b11"}]), None,
     "needs network.backend neutron"),
])
def test_a_malformed_or_over_limit_body_is_400_with_novas_error_shape(
        cloud: Cloud, body: object, raw: bytes | None, words: str) -> None:
    response = _create(cloud, body, raw=raw)
    assert response.status_code == 400, response.text
    fault = response.json()["badRequest"]
    assert fault["code"] == 400 and words in fault["message"]
    assert "\n" not in fault["message"]
    _nothing_left(cloud)


def test_user_data_over_65535_bytes_is_refused(cloud: Cloud) -> None:
    too_big = base64.b64encode(b"#!/bin/sh\n" + b"x" * 65536).decode()
    response = _create(cloud, _server(user_data=too_big))
    assert response.status_code == 400
    assert "Invalid input for field/attribute user_data" in \
        response.json()["badRequest"]["message"]
    not_base64 = _create(cloud, _server(user_data="not base64!"))
    assert not_base64.status_code == 400
    _nothing_left(cloud)


@pytest.mark.parametrize("header,value,status", [
    ("OpenStack-API-Version", "compute 3.0", 406),
    ("OpenStack-API-Version", "compute 2.1000", 406),
    ("X-OpenStack-Nova-API-Version", "1.1", 406),
    ("OpenStack-API-Version", "compute two", 400),
])
def test_a_microversion_out_of_range_is_406(cloud: Cloud, header: str, value: str,
                                             status: int) -> None:
    response = cloud.session("demo").get(cloud.api.endpoint + "/servers",
                                         headers={header: value}, raise_exc=False)
    assert response.status_code == status
    fault = response.json()
    name = "computeFault" if status == 406 else "badRequest"
    assert fault[name]["code"] == status
    if status == 406:
        assert "is not supported by the API. Minimum is 2.1 and maximum is" in \
            fault[name]["message"]
        # Nova names the version asked for, and varies on the headers.
        assert "OpenStack-API-Version" in response.headers.get("Vary", "")


def test_the_latest_microversion_is_the_versions_documents_maximum(cloud: Cloud) -> None:
    document = requests.get(cloud.api.endpoint, verify=str(cloud.ca), timeout=10).json()
    maximum = document["version"]["version"]
    response = cloud.session("demo").get(cloud.api.endpoint + "/servers",
                                         headers={"OpenStack-API-Version": "compute latest"},
                                         raise_exc=False)
    assert response.status_code == 200
    assert response.headers["OpenStack-API-Version"] == f"compute {maximum}"
    assert response.headers["X-OpenStack-Nova-API-Version"] == maximum


def test_a_missing_or_bad_token_is_401(cloud: Cloud) -> None:
    url = cloud.api.endpoint + "/servers"
    for headers in ({}, {"X-Auth-Token": "gAAAAAnot-a-token"}):
        response = requests.post(url, json=_server(), headers=headers, verify=str(cloud.ca),
                                 timeout=30)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == 401
        assert response.headers["WWW-Authenticate"].startswith("Keystone uri=")
    # Identity headers a client sends are not trusted: auth_token replaces them.
    forged = requests.get(url, headers={"X-Identity-Status": "Confirmed", "X-Roles": "admin",
                                        "X-Project-Id": "demo", "X-User-Id": "x"},
                          verify=str(cloud.ca), timeout=30)
    assert forged.status_code == 401
    _nothing_left(cloud)


def test_a_reader_may_look_but_not_create(cloud: Cloud) -> None:
    cloud.keystone.add_user("watcher", "watcher-secret", "demo", "reader")
    from keystoneauth1 import session
    from keystoneauth1.identity import v3

    auth = v3.Password(auth_url=cloud.keystone.auth_url, username="watcher",
                       password="watcher-secret", project_name="demo",
                       user_domain_name="Default", project_domain_name="Default")
    reader = session.Session(auth=auth, verify=str(cloud.ca))
    assert reader.get(cloud.api.endpoint + "/servers").status_code == 200
    refused = reader.post(cloud.api.endpoint + "/servers", json=_server(), raise_exc=False)
    assert refused.status_code == 403
    assert refused.json()["forbidden"]["message"] == \
        "Policy doesn't allow os_compute_api:servers:create to be performed."
    _nothing_left(cloud)
