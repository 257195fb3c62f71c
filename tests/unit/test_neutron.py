"""The Neutron client over canned answers: its requests, and how Neutron's answers become
one-line errors."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

from etcd_compute.errors import ConfigError, NeutronError, NeutronUnavailable, NotFound
from etcd_compute.neutron import CONNECT_RETRIES, IDS_PER_QUERY, NeutronClient

ENDPOINT = "http://neutron.invalid:9696"
PORT_ID = "0b5c7d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f"
KEYSTONE = {"auth_url": "https://keystone.invalid/v3", "username": "etcd-compute",
            "password": "x", "project_name": "service"}


def response(status: int, body: Any = None, text: str = "") -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    answer._content = json.dumps(body).encode() if body is not None else text.encode()
    answer.encoding = "utf-8"
    return answer


class Session:
    """Stands in for the keystoneauth1 session: records what was sent, answers from a
    script of "METHOD path" -> response (or a callable of the request's keywords)."""

    def __init__(self, answers: dict[str, Any]):
        self.answers = answers
        self.sent: list[tuple[str, str, dict[str, Any]]] = []

    def request(self, url: str, method: str, **kwargs: Any) -> requests.Response:
        path = url.removeprefix(ENDPOINT)
        self.sent.append((method, path, kwargs))
        answer = self.answers.get(f"{method} {path}")
        if answer is None:
            return response(404, {"NeutronError": {"type": "HTTPNotFound",
                                                   "message": "The resource could not be "
                                                              "found.", "detail": ""}})
        if isinstance(answer, Exception):
            raise answer
        return answer(kwargs) if callable(answer) else answer


def client(answers: dict[str, Any]) -> tuple[NeutronClient, Session]:
    neutron = NeutronClient({"endpoint": ENDPOINT, "keystone": KEYSTONE, "timeout": 5.0})
    session = Session(answers)
    neutron.session = session
    return neutron, session


def test_without_a_credential_the_backend_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match="network.neutron.keystone is not set"):
        NeutronClient({"endpoint": ENDPOINT, "keystone": None})


def test_a_port_is_created_in_neutrons_envelope() -> None:
    neutron, session = client({"POST /v2.0/ports": response(201, {"port": {"id": PORT_ID}})})
    assert neutron.create_port({"network_id": "n", "device_id": "d"}) == {"id": PORT_ID}
    assert session.sent[0][2]["json"] == {"port": {"network_id": "n", "device_id": "d"}}


def test_neutrons_refusal_keeps_its_status_and_type() -> None:
    body = {"NeutronError": {"type": "IpAddressAlreadyAllocated",
                             "message": "IP address 10.0.0.5 already allocated\nin subnet s",
                             "detail": ""}}
    neutron, _ = client({"POST /v2.0/ports": response(409, body)})
    with pytest.raises(NeutronError) as refused:
        neutron.create_port({"network_id": "n"})
    assert refused.value.status == 409
    assert refused.value.kind == "IpAddressAlreadyAllocated"
    assert "\n" not in str(refused.value) and "10.0.0.5 already allocated in subnet" in str(
        refused.value)


def test_a_missing_port_is_not_found_and_deleting_it_again_is_no_error() -> None:
    neutron, _ = client({})
    with pytest.raises(NotFound):
        neutron.port(PORT_ID)
    assert neutron.delete_port(PORT_ID) is False


def test_a_hostile_id_never_reaches_a_path() -> None:
    neutron, session = client({})
    with pytest.raises(NotFound, match="not an id"):
        neutron.port("../networks?x=1")
    assert session.sent == []


@pytest.mark.parametrize("status", [401, 500, 503])
def test_a_broken_or_refusing_neutron_is_unavailable(status: int) -> None:
    neutron, _ = client({f"GET /v2.0/ports/{PORT_ID}": response(status, text="<h1>down</h1>")})
    with pytest.raises(NeutronUnavailable, match=f"Neutron: GET /ports/{PORT_ID}: {status}"):
        neutron.port(PORT_ID)


def test_an_unreachable_neutron_is_unavailable() -> None:
    from keystoneauth1 import exceptions as ks_exceptions

    neutron, _ = client({"GET /v2.0/networks": ks_exceptions.ConnectFailure("refused")})
    with pytest.raises(NeutronUnavailable, match="unreachable"):
        neutron.networks()


def test_a_connection_neutron_does_not_accept_in_time_is_tried_again_as_nova_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read Neutron is too busy to answer in time (a timeout on a loaded machine) is
    tried again, CONNECT_RETRIES times, before the build fails: Nova's [neutron]
    http_retries. A POST is never sent twice: keystoneauth calls a read timeout a connect
    timeout, and Neutron may have made the port already."""
    from keystoneauth1 import session as ks_session
    from requests.adapters import BaseAdapter

    monkeypatch.setattr(ks_session.time, "sleep", lambda seconds: None)  # its back-off

    class Busy(BaseAdapter):
        def __init__(self, refusals: int) -> None:
            super().__init__()
            self.refusals, self.sent = refusals, 0

        def send(self, request: Any, **kwargs: Any) -> requests.Response:
            self.sent += 1
            if self.sent <= self.refusals:
                raise requests.exceptions.ConnectTimeout("connect timed out")
            answer = response(200, {"networks": []})
            answer.request, answer.url = request, request.url
            return answer

        def close(self) -> None:
            pass

    for refusals, works in ((CONNECT_RETRIES, True), (CONNECT_RETRIES + 1, False)):
        neutron = NeutronClient({"endpoint": ENDPOINT, "keystone": KEYSTONE})
        adapter = Busy(refusals)
        transport = requests.Session()
        transport.mount("http://", adapter)
        neutron.session = ks_session.Session(session=transport)
        if works:
            assert neutron.networks() == []
        else:
            with pytest.raises(NeutronUnavailable, match="unreachable"):
                neutron.networks()
        assert adapter.sent == refusals + 1 if works else CONNECT_RETRIES + 1
    neutron = NeutronClient({"endpoint": ENDPOINT, "keystone": KEYSTONE})
    adapter = Busy(1)
    transport = requests.Session()
    transport.mount("http://", adapter)
    neutron.session = ks_session.Session(session=transport)
    with pytest.raises(NeutronUnavailable, match="unreachable"):
        neutron.request("POST", "/ports", expect=(201,), json={"port": {}})
    assert adapter.sent == 1  # not repeated


def test_many_devices_are_asked_for_in_slices() -> None:
    devices = [f"d{n}" for n in range(IDS_PER_QUERY * 2 + 1)]

    def answer(kwargs: dict[str, Any]) -> requests.Response:
        return response(200, {"ports": [{"device_id": d} for d in kwargs["params"]["device_id"]]})

    neutron, session = client({"GET /v2.0/ports": answer})
    found = neutron.ports(device_id=devices)
    assert [port["device_id"] for port in found] == devices
    assert len(session.sent) == 3


def test_floating_ips_are_listed_by_their_filters() -> None:
    neutron, session = client({"GET /v2.0/floatingips": response(200, {"floatingips": [
        {"floating_ip_address": "203.0.113.5", "port_id": "p"}]})})
    assert neutron.floating_ips(port_id=["p"]) == [
        {"floating_ip_address": "203.0.113.5", "port_id": "p"}]
    assert session.sent[0][2]["params"] == {"port_id": ["p"]}


def test_a_port_update_with_a_revision_asks_neutron_to_check_it():
    """If-Match: revision_number=N (Neutron's revision-if-match): refused with 412 when the
    port changed since it was read, so two writers cannot both bind it."""
    neutron, session = client({
        f"PUT /v2.0/ports/{PORT_ID}": lambda sent: response(200, {"port": {
            "id": PORT_ID, **sent["json"]["port"]}}) if sent["headers"].get("If-Match") ==
        "revision_number=7" else response(412, {"NeutronError": {
            "type": "RevisionNumberConstraintFailed", "message": "Constrained to 7."}})})
    assert neutron.update_port(PORT_ID, {"device_id": "d"}, revision=7)["device_id"] == "d"
    with pytest.raises(NeutronError) as refused:
        neutron.update_port(PORT_ID, {"device_id": "d"}, revision=6)
    assert (refused.value.status, refused.value.kind) == (412, "RevisionNumberConstraintFailed")
    assert [kwargs["headers"] for _, _, kwargs in session.sent] == [
        {"If-Match": "revision_number=7"}, {"If-Match": "revision_number=6"}]


def test_a_port_binding_is_made_for_a_host_activated_and_deleted_by_its_host() -> None:
    base = f"/v2.0/ports/{PORT_ID}/bindings"
    binding = {"host": "hv2", "status": "INACTIVE"}
    neutron, session = client({
        f"POST {base}": response(201, {"binding": binding}),
        f"PUT {base}/hv2/activate": response(200, {"binding": {**binding,
                                                               "status": "ACTIVE"}}),
        f"GET {base}": response(200, {"bindings": [binding]}),
        f"DELETE {base}/hv1": response(204)})
    assert neutron.create_port_binding(PORT_ID, "hv2") == binding
    assert session.sent[0][2]["json"] == {"binding": {"host": "hv2"}}
    assert neutron.activate_port_binding(PORT_ID, "hv2")["status"] == "ACTIVE"
    assert neutron.port_bindings(PORT_ID) == [binding]
    assert neutron.delete_port_binding(PORT_ID, "hv1") is True
    assert neutron.delete_port_binding(PORT_ID, "hv3") is False  # none for that host


def test_an_activation_answered_without_the_envelope_is_the_binding() -> None:
    neutron, _ = client({f"PUT /v2.0/ports/{PORT_ID}/bindings/hv2/activate": response(
        200, {"host": "hv2", "status": "ACTIVE"})})
    assert neutron.activate_port_binding(PORT_ID, "hv2")["status"] == "ACTIVE"


def test_a_binding_s_host_is_one_path_segment_and_its_port_an_id() -> None:
    neutron, session = client({})
    with pytest.raises(NotFound, match="not an id"):
        neutron.create_port_binding("../networks", "hv2")
    assert session.sent == []
    neutron.delete_port_binding(PORT_ID, "../../networks")
    assert session.sent[0][1] == f"/v2.0/ports/{PORT_ID}/bindings/..%2F..%2Fnetworks"


def test_a_group_asked_for_is_its_id_else_every_group_of_that_name() -> None:
    from etcd_compute.neutron import matching_groups

    groups = [{"id": "a", "name": "web"}, {"id": "b", "name": "web"}, {"id": "c", "name": "a"}]
    assert matching_groups(groups, "a") == ["a"]  # the id first, not group c's name
    assert matching_groups(groups, "web") == ["a", "b"]
    assert matching_groups(groups, "db") == []


def test_a_projects_port_quota_is_read_from_its_quotas() -> None:
    project = "0b5c7d2e1f3a4b6c8d9e0a1b2c3d4e5f"
    neutron, session = client({f"GET /v2.0/quotas/{project}": response(200, {
        "quota": {"port": 7, "network": 100}})})
    assert neutron.port_quota(project) == 7
    assert [(method, path) for method, path, _ in session.sent] == [
        ("GET", f"/v2.0/quotas/{project}")]
    with pytest.raises(NotFound):
        neutron.port_quota("../networks")


def test_connecting_looks_at_the_binding_extension_and_a_missing_one_is_an_error() -> None:
    neutron, session = client({"GET /v2.0/extensions/binding-extended": response(
        200, {"extension": {"alias": "binding-extended"}})})
    neutron.connect()
    assert [(m, p) for m, p, _ in session.sent] == [
        ("GET", "/v2.0/extensions/binding-extended")]
    neutron, _session = client({})
    with pytest.raises(NotFound, match="binding-extended"):
        neutron.connect()
