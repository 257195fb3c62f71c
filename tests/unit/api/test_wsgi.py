"""Routes (also under a project id), Nova's fault bodies, bounded JSON bodies."""

from __future__ import annotations

import pytest
import webob

from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    fault_response,
    json_response,
)


def test_routes_match_method_and_path_with_parameters_and_a_project_prefix():
    router = Router()
    router.add("GET", "/servers/detail", lambda req: "detail")
    router.add("GET", "/servers/{server_id}", lambda req, server_id: server_id)
    handler, params = router.match("GET", "/servers/detail")
    assert handler(None) == "detail" and params == {}
    handler, params = router.match("GET", "/abc123/servers/u-1/")
    assert params == {"project_id": "abc123", "server_id": "u-1"}
    for method, path in (("DELETE", "/servers/u-1"), ("GET", "/servers/a/b"),
                         ("GET", "/servers/")):
        with pytest.raises(Fault) as caught:
            router.match(method, path)
        assert caught.value.status == 404


@pytest.mark.parametrize("status,name", [(400, "badRequest"), (403, "forbidden"),
                                         (404, "itemNotFound"), (409, "conflictingRequest"),
                                         (406, "computeFault"), (500, "computeFault")])
def test_faults_have_novas_shape(status, name):
    response = fault_response(status, "why", [("Retry-After", "3")])
    assert response.status_int == status and response.json == {
        name: {"code": status, "message": "why"}}
    assert response.headers["Retry-After"] == "3"


def test_bodies_are_json_within_their_limit():
    def request(raw: bytes) -> ApiRequest:
        req = ApiRequest.blank("/", method="POST")
        req.body = raw
        return req

    assert request(b'{"a": [1]}').json_body() == {"a": [1]}
    for raw in (b"", b"{", b"NaN", b'{"a": Infinity}', b"[" * 100000):
        with pytest.raises(Fault) as caught:
            request(raw).json_body()
        assert caught.value.status == 400 and caught.value.message == "Malformed request body"


# Nova's limit written out, not read from the module (a changed limit must fail): its
# [oslo_middleware] max_request_body_size default; sizelimit refuses only a longer body.
NOVAS_LIMIT = 114_688


@pytest.mark.parametrize("sent", ["with its length", "chunked"])
def test_a_body_of_novas_limit_is_read_and_one_byte_more_is_413(sent: str):
    def request(size: int) -> ApiRequest:
        raw = b'{"a": "' + b"x" * (size - 9) + b'"}'
        assert len(raw) == size
        req = ApiRequest.blank("/", method="POST")
        req.body = raw
        if sent == "chunked":  # no Content-Length: only the bytes read tell
            req.content_length = None
            req.is_body_readable = True
        return req

    assert len(request(NOVAS_LIMIT).json_body()["a"]) == NOVAS_LIMIT - 9
    with pytest.raises(Fault) as caught:
        request(NOVAS_LIMIT + 1).json_body()
    assert (caught.value.status, caught.value.message) == (413, "Request is too large.")


def test_query_keeps_every_value_and_links_use_the_public_url():
    req = ApiRequest.blank("/v2.1/servers?status=ACTIVE&status=ERROR&limit=2")
    assert req.query() == {"status": ["ACTIVE", "ERROR"], "limit": ["2"]}
    assert req.url_for("v2.1", "servers", "x") == "http://localhost/v2.1/servers/x"
    req.environ["etcd_compute.public_url"] = "https://api.example:8774/"
    assert req.url_for("flavors", "1") == "https://api.example:8774/flavors/1"
    assert json_response(None, 204).body == b""
    assert isinstance(req, webob.Request)
