"""bench/dashboard.py's pure parts: the calls Horizon made, read from its log (keystoneauth's
and glanceclient's debug lines), grouped by service and kind; the compute API's access log;
the login form's hidden fields."""

from __future__ import annotations

import pytest

from bench.dashboard import (
    Call,
    access_log_requests,
    by_kind,
    call_kind,
    hidden_fields,
    horizon_calls,
    merged,
    service_of,
    tally,
)

API, GLANCE, NEUTRON = "127.0.0.1:40001", "127.0.0.1:40002", "127.0.0.1:40003"
ENDPOINTS = {API: "compute", GLANCE: "image", NEUTRON: "network"}
SERVER = "0b9e3a5c-52c4-4a8e-9a43-3f3e0d1c6a11"

LOG = f"""\
2026-12-06 14:05:08,100 11 21 INFO django.request something else
2026-12-06 14:05:08,123 11 21 DEBUG keystoneauth.session REQ: curl -g -i --cacert "/r/ca.pem" \
-X GET https://{API}/v2.1/servers/detail?limit=21&project_id=p -H "Accept: application/json"
2026-12-06 14:05:08,130 11 22 DEBUG glanceclient.common.http curl -g -i -X GET \
-H 'Accept-Encoding: gzip' -H 'X-Auth-Token: {{SHA256}}ab' --cacert /r/ca.pem \
https://{GLANCE}/v2/images?limit=1000&sort_key=created_at
2026-12-06 14:05:08,180 11 22 DEBUG glanceclient.common.http{' '}
HTTP/1.1 200 OK
Content-Type: application/json

2026-12-06 14:05:08,345 11 21 DEBUG keystoneauth.session RESP: [200] Content-Length: 99
2026-12-06 14:05:08,346 11 21 DEBUG keystoneauth.session RESP BODY: {{"servers": []}}
2026-12-06 14:05:08,347 11 21 DEBUG keystoneauth.session GET call to compute for \
https://{API}/v2.1/servers/detail used request id req-1
2026-12-06 14:05:09,000 12 21 DEBUG keystoneauth.session REQ: curl -g -i -X GET \
https://{API}/v2.1/servers/{SERVER}/os-interface -H "Accept: application/json"
2026-12-06 14:05:09,250 12 21 DEBUG keystoneauth.session RESP: [404] Content-Length: 10
2026-12-06 14:05:09,300 11 21 DEBUG keystoneauth.session REQ: curl -g -i -X GET \
https://{NEUTRON}/v2.0/ports?device_id=a -H "Accept: application/json"
"""


def test_each_request_is_paired_with_its_answer_in_the_same_process_and_thread():
    calls = horizon_calls(LOG)
    assert calls == [
        Call("GET", f"https://{GLANCE}/v2/images?limit=1000&sort_key=created_at", 200, 0.05),
        Call("GET", f"https://{API}/v2.1/servers/detail?limit=21&project_id=p", 200, 0.222),
        Call("GET", f"https://{API}/v2.1/servers/{SERVER}/os-interface", 404, 0.25),
    ]  # the ports request has no answer yet: left out


def test_calls_are_grouped_by_service_and_kind_with_ids_folded():
    assert call_kind("GET", f"https://{API}/v2.1/servers/{SERVER}/os-interface?x=1") == \
        "GET /v2.1/servers/{id}/os-interface"
    assert call_kind("GET", f"https://{API}/v2.1/servers/detail/") == "GET /v2.1/servers/detail"
    assert service_of(f"https://{NEUTRON}/v2.0/ports", ENDPOINTS) == "network"
    assert service_of("https://127.0.0.1:9/x", ENDPOINTS) == "127.0.0.1:9"
    counted = tally(horizon_calls(LOG), ENDPOINTS)
    assert counted["count"] == 3
    assert counted["seconds"] == pytest.approx(0.522)
    assert counted["by_service"] == {"image": {"count": 1, "seconds": 0.05},
                                     "compute": {"count": 2, "seconds": 0.472}}
    assert counted["by_kind"]["compute GET /v2.1/servers/detail"] == {"count": 1,
                                                                      "seconds": 0.222}
    assert counted["errors"] == [
        f"GET https://{API}/v2.1/servers/{SERVER}/os-interface -> 404"]


def test_the_compute_apis_access_log_is_counted_by_request():
    text = ('127.0.0.1 - - [06/Dec/2026:14:05:08 +0000] "GET /v2.1/servers/detail?limit=21 '
            'HTTP/1.1" 200 1234 "-" "python-novaclient"\n'
            'gunicorn noise\n'
            '127.0.0.1 - - [06/Dec/2026:14:05:09 +0000] "GET /v2.1/flavors/detail HTTP/1.1" '
            '200 99 "-" "openstacksdk"\n')
    assert access_log_requests(text) == ["GET /v2.1/servers/detail?limit=21",
                                         "GET /v2.1/flavors/detail"]


def test_the_login_forms_hidden_fields_are_read():
    page = ('<form><input type="hidden" name="csrfmiddlewaretoken" value="tok">'
            '<input type="text" name="username" value="">'
            '<input id="id_region" name="region" type="hidden" value="https://k/v3">'
            '<input type="hidden" name="next"></form>')
    assert hidden_fields(page) == {"csrfmiddlewaretoken": "tok", "region": "https://k/v3",
                                   "next": ""}


def test_kinds_of_calls_are_summed_over_pages_then_taken_at_p50_over_rounds():
    one = {"by_kind": {"compute GET /v2.1/limits": {"count": 1, "seconds": 0.1}}}
    two = {"by_kind": {"compute GET /v2.1/limits": {"count": 2, "seconds": 0.3},
                       "image GET /v2/images": {"count": 1, "seconds": 0.2}}}
    assert merged([one, two]) == {"by_kind": {
        "compute GET /v2.1/limits": {"count": 3, "seconds": 0.4},
        "image GET /v2/images": {"count": 1, "seconds": 0.2}}}
    # A round without a kind counts it as none: p50 of (0, 1, 1) image calls is 1.
    assert by_kind([one, two, two]) == {
        "compute GET /v2.1/limits": {"count_p50": 2, "seconds_p50": 0.3},
        "image GET /v2/images": {"count_p50": 1, "seconds_p50": 0.2}}
