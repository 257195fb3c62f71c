"""The stack: versions documents without a token, the dispatcher's refusals, Nova's
headers on every answer, a 500 that says nothing of the fault."""

from __future__ import annotations

import webob

from etcd_compute.api import app as app_module
from etcd_compute.api import microversion
from tests.unit.api.harness import Harness


def test_versions_documents_need_no_token_and_name_the_range():
    harness = Harness.new(public_url="https://cloud.example:8774")
    root = webob.Request.blank("/").get_response(harness.app)
    version = root.json["versions"][0]
    assert (version["id"], version["version"], version["min_version"]) == \
        ("v2.1", str(microversion.MAX), "2.1")
    assert version["links"] == [{"rel": "self", "href": "https://cloud.example:8774/v2.1/"}]
    shown = webob.Request.blank("/v2.1", headers={
        "OpenStack-API-Version": "compute 2.5"}).get_response(harness.app)
    assert shown.json["version"]["media-types"][0]["type"] == \
        "application/vnd.openstack.compute+json;version=2.1"
    assert shown.headers["OpenStack-API-Version"] == "compute 2.5"
    assert webob.Request.blank("/v3").get_response(harness.app).status_int == 404


def test_every_answer_carries_the_version_and_a_request_id():
    harness = Harness.new()
    response = harness.call("GET", "/v2.1/flavors", version="2.10")
    assert response.headers["OpenStack-API-Version"] == "compute 2.10"
    assert response.headers["X-OpenStack-Nova-API-Version"] == "2.10"
    assert response.headers.getall("Vary") == ["OpenStack-API-Version",
                                               "X-OpenStack-Nova-API-Version"]
    assert response.headers["X-OpenStack-Request-ID"].startswith("req-")
    assert response.headers["X-Compute-Request-ID"] == \
        response.headers["X-OpenStack-Request-ID"]


def test_no_confirmed_caller_is_401_and_a_foreign_project_in_the_url_is_400():
    harness = Harness.new()
    unconfirmed = harness.call("GET", "/v2.1/servers", confirmed=False)
    assert unconfirmed.status_int == 401 and "unauthorized" in unconfirmed.json
    # Keystone's project ids are hex, as Nova's routes expect them.
    mismatch = harness.call("GET", "/v2.1/cd34/servers", project="ab12")
    assert mismatch.status_int == 400
    assert "doesn't match Context's project_id 'ab12'" in \
        mismatch.json["badRequest"]["message"]
    assert harness.call("GET", "/v2.1/ab12/servers", project="ab12").status_int == 200
    assert harness.call("GET", "/v2.1/nothing-here").status_int == 404


def test_an_unexpected_fault_is_500_without_details(monkeypatch):
    harness = Harness.new()

    def broken(*_args, **_kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(harness.backend.flavors, "list", broken)
    response = harness.call("GET", "/v2.1/flavors")
    assert response.status_int == 500
    assert "secret" not in response.text
    assert response.json["computeFault"]["code"] == 500


def test_auth_token_is_required_to_serve():
    from etcd_compute.errors import ConfigError

    try:
        app_module.authenticated(lambda e, s: [], None)
    except ConfigError as exc:
        assert "keystone_authtoken" in str(exc)
    else:
        raise AssertionError("served without auth_token")


def test_a_failure_of_the_token_check_is_novas_503_not_a_traceback():
    import webob

    from etcd_compute.api.app import Root

    def broken(_environ, _start_response):
        raise RuntimeError("SSL: CERTIFICATE_VERIFY_FAILED\ncontacting Keystone")

    answer = webob.Request.blank("/v2.1/servers").get_response(Root(broken))
    assert answer.status_int == 503
    assert answer.json["serviceUnavailable"]["message"].startswith("The service is unavailable")
