"""The Placement client over canned HTTP answers: what it sends, and how answers become
one-line errors, retries and providers."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import requests

from etcd_compute import placement as placement_module
from etcd_compute.errors import (
    ConflictError,
    NotFound,
    PlacementError,
    PlacementUnavailable,
    ServiceUnavailable,
)
from etcd_compute.placement import (
    CONCURRENT_UPDATE,
    GENERATION_RETRIES,
    MICROVERSION,
    PlacementClient,
)

ENDPOINT = "http://placement.invalid:8080"
RP = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
OTHER = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"
INVENTORY = {"VCPU": {"total": 8}}


def response(status: int, body: Any = None, text: str | None = None) -> requests.Response:
    answer = requests.Response()
    answer.status_code = status
    if body is not None:
        answer._content = json.dumps(body).encode()
        answer.headers["content-type"] = "application/json"
    else:
        answer._content = (text or "").encode()
    answer.encoding = "utf-8"
    return answer


def error(status: int, code: str | None = None, detail: str = "it went wrong"):
    body = {"errors": [{"status": status, "title": "x", "detail": detail,
                        **({"code": code} if code else {})}]}
    return response(status, body)


def provider(uuid: str = RP, name: str = "host-a", generation: int = 5) -> requests.Response:
    return response(200, {"uuid": uuid, "name": name, "generation": generation})


class Wire:
    """Stands in for requests.Session.request: records what was sent, answers from a script.

    A request is prepared by the real session, so the headers recorded are the ones sent.
    """

    def __init__(self, client: PlacementClient, answers: list[Any]):
        self.client, self.answers = client, list(answers)
        self.sent: list[requests.PreparedRequest] = []
        self.timeouts: list[float] = []

    def __call__(self, method: str, url: str, json: Any = None, timeout: float | None = None,
                 headers: dict[str, str] | None = None, **_kwargs: Any) -> requests.Response:
        self.sent.append(self.client.session.prepare_request(
            requests.Request(method, url, json=json, headers=headers)))
        self.timeouts.append(timeout)
        if not self.answers:
            raise AssertionError(f"unexpected request {method} {url}")
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def calls(self) -> list[str]:
        return [f"{r.method} {r.path_url}" for r in self.sent]

    def body(self, index: int) -> Any:
        return json.loads(self.sent[index].body)


@pytest.fixture
def client() -> PlacementClient:
    return PlacementClient({"endpoint": ENDPOINT + "/", "token": "secret", "timeout": 7.5})


@pytest.fixture
def wire(client: PlacementClient, monkeypatch: pytest.MonkeyPatch):
    def script(*answers: Any) -> Wire:
        fake = Wire(client, list(answers))
        monkeypatch.setattr(client.session, "request", fake)
        return fake

    return script


# ------------------------------------------------------------------ transport


def test_every_request_carries_the_microversion_token_and_timeout(client, wire):
    fake = wire(response(200, {"resource_providers": []}))
    client.list_providers(name="host a")
    (sent,) = fake.sent
    assert sent.headers["openstack-api-version"] == f"placement {MICROVERSION}"
    assert MICROVERSION == "1.39"
    assert sent.headers["x-auth-token"] == "secret"
    assert sent.headers["accept"] == "application/json"
    assert sent.url == ENDPOINT + "/resource_providers?name=host+a"  # trailing / dropped
    assert fake.timeouts == [7.5]


def test_a_409_is_a_conflict_with_placements_code_and_is_counted(client, wire):
    wire(error(409, CONCURRENT_UPDATE, "resource provider generation conflict"),
         error(409, "placement.undefined_code"))
    with pytest.raises(ConflictError) as caught:
        client.claim("c", {RP: {"resources": {"VCPU": 1}}}, "p", "u")
    assert (caught.value.status, caught.value.code) == (409, CONCURRENT_UPDATE)
    assert str(caught.value) == ("Placement PUT /allocations/c: 409 "
                                 "resource provider generation conflict")
    assert client.conflicts == 1
    with pytest.raises(ConflictError):
        client.claim("c", {RP: {"resources": {"VCPU": 1}}}, "p", "u")
    assert client.conflicts == 2


def test_a_409_without_a_json_body_is_still_a_conflict(client, wire):
    wire(response(409, text="<html>\n  Conflict\n</html>"))
    with pytest.raises(ConflictError) as caught:
        client.claim_many({"c": {}}, "p", "u")
    assert caught.value.code is None and "\n" not in str(caught.value)
    assert "<html> Conflict </html>" in str(caught.value)


def test_a_404_is_not_found(client, wire):
    wire(error(404, "placement.undefined_code", "No resource provider with uuid x found"))
    with pytest.raises(NotFound, match="Placement GET /resource_providers/x/traits: 404 No"):
        client.get_traits("x")


def test_an_error_message_names_the_path_without_its_query(client, wire):
    wire(error(400, detail="bad query"))
    with pytest.raises(PlacementError) as caught:
        client.allocation_candidates("resources=VCPU:1&limit=3")
    assert str(caught.value) == "Placement GET /allocation_candidates: 400 bad query"
    assert caught.value.status == 400


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_are_service_unavailable_pointing_at_the_token(client, wire, status):
    wire(error(status, detail="The request you have made requires authentication."))
    with pytest.raises(ServiceUnavailable) as caught:
        client.get_usages(RP)
    assert str(caught.value).endswith("; check placement.token")
    assert caught.value.exit_code == 3


class FakeTokens:
    """Stands in for KeystoneTokens: a new token after each invalidation."""

    def __init__(self) -> None:
        self.issued = 1

    def token(self) -> str:
        return f"token-{self.issued}"

    def invalidate(self) -> None:
        self.issued += 1


def test_a_refused_keystone_token_is_renewed_once_then_the_fault_names_placement_keystone(
        client, wire):
    client.keystone = FakeTokens()
    fake = wire(error(401, detail="expired"), response(200, {"usages": {}}),
                error(401, detail="expired"), error(401, detail="still refused"))
    client.get_usages(RP)
    assert [r.headers["x-auth-token"] for r in fake.sent] == ["token-1", "token-2"]
    with pytest.raises(ServiceUnavailable) as caught:
        client.get_usages(RP)
    assert [r.headers["x-auth-token"] for r in fake.sent[2:]] == ["token-2", "token-3"]
    assert str(caught.value).endswith("; check placement.keystone (its user needs the "
                                      "service or admin role)")


@pytest.mark.parametrize("exc", [requests.ConnectionError("refused"),
                                 requests.Timeout("slow"),
                                 requests.exceptions.ChunkedEncodingError("cut")])
def test_an_unreachable_placement_is_service_unavailable_naming_the_endpoint(client, wire, exc):
    wire(exc)
    with pytest.raises(ServiceUnavailable) as caught:
        client.get_provider(RP)
    text = str(caught.value)
    assert text.startswith(f"Placement at {ENDPOINT} is unreachable ({exc.__class__.__name__})")
    assert "placement.endpoint" in text and "\n" not in text


def test_a_server_error_is_a_one_line_placement_error(client, wire):
    wire(error(500, detail="Traceback (most recent call last):\n  File x\n\nKeyError: 'y'\n"))
    with pytest.raises(PlacementError) as caught:
        client.get_inventories(RP)
    assert type(caught.value) is PlacementError and caught.value.status == 500
    assert str(caught.value).endswith("500 Traceback (most recent call last): File x KeyError: 'y'")


@pytest.mark.parametrize(("answer", "counted"), [
    (requests.ConnectionError("refused"), 1),
    (requests.exceptions.SSLError("[SSL: CERTIFICATE_VERIFY_FAILED] x"), 1),
    (error(503), 1),
    (error(500), 1),
    (error(401), 1),
    (error(403), 1),
    (error(404), 0),
    (error(409, CONCURRENT_UPDATE), 0),
    (error(400), 0),
    (response(200, {"usages": {}}), 0),
])
def test_placement_errors_are_counted_for_the_metrics_and_answers_are_not(client, wire, answer,
                                                                          counted):
    from etcd_compute import metrics

    before = metrics.BACKEND_ERRORS.value("placement")
    wire(answer)
    with contextlib.suppress(PlacementError, NotFound, ServiceUnavailable):
        client.get_usages(RP)
    assert metrics.BACKEND_ERRORS.value("placement") == before + counted


@pytest.mark.parametrize("answer", [requests.ConnectionError("refused"), error(401)])
def test_an_unreachable_or_refusing_placement_is_placement_unavailable(client, wire, answer):
    wire(answer)
    with pytest.raises(PlacementUnavailable):
        client.get_usages(RP)


def test_one_line_folds_lines_and_caps_the_length():
    assert placement_module._one_line("  a\n\n  b  \r\n c\n") == "a b c"
    assert placement_module._one_line("") == ""
    assert len(placement_module._one_line("x" * 1000)) == 400


@pytest.mark.parametrize(("status", "deleted"), [(204, True), (404, False)])
def test_delete_allocations_says_whether_there_were_any(client, wire, status, deleted):
    fake = wire(response(status))
    assert client.delete_allocations("c") is deleted
    assert fake.calls() == ["DELETE /allocations/c"]


def test_claim_is_a_put_for_a_new_consumer(client, wire):
    fake = wire(response(204))
    client.claim("c", {RP: {"resources": {"VCPU": 1}}}, "p", "u")
    assert fake.calls() == ["PUT /allocations/c"]
    assert fake.body(0) == {"allocations": {RP: {"resources": {"VCPU": 1}}}, "project_id": "p",
                            "user_id": "u", "consumer_generation": None,
                            "consumer_type": "INSTANCE"}


def test_claim_many_is_one_post_with_every_consumer(client, wire):
    fake = wire(response(204))
    client.claim_many({"a": {RP: {"resources": {"VCPU": 1}}},
                       "b": {OTHER: {"resources": {"VCPU": 2}}}}, "p", "u", "MIGRATION")
    assert fake.calls() == ["POST /allocations"]
    body = fake.body(0)
    assert set(body) == {"a", "b"}
    assert body["b"] == {"allocations": {OTHER: {"resources": {"VCPU": 2}}}, "project_id": "p",
                         "user_id": "u", "consumer_generation": None,
                         "consumer_type": "MIGRATION"}


def test_replace_many_is_one_post_with_each_consumers_generation(client, wire):
    fake = wire(response(204))
    client.replace_many({"a": {"allocations": {RP: {"resources": {"VCPU": 1}}},
                               "project_id": "p", "user_id": "u", "consumer_generation": 3},
                         "b": {"allocations": {}, "project_id": "p", "user_id": "u",
                               "consumer_generation": 7}})
    assert fake.calls() == ["POST /allocations"]
    body = fake.body(0)
    assert body["a"]["consumer_generation"] == 3 and body["b"]["consumer_generation"] == 7
    assert body["a"]["consumer_type"] == "INSTANCE"


def test_a_200_where_204_was_expected_is_an_error(client, wire):
    wire(response(200, {}))
    with pytest.raises(PlacementError):
        client.claim("c", {}, "p", "u")


# ------------------------------------------------------------------ generations


def held(generation: int, **content: Any) -> requests.Response:
    """GET /resource_providers/<rp>/{inventories,traits,aggregates}: what the provider holds."""
    return response(200, {"resource_provider_generation": generation, **content})


def test_a_write_without_a_generation_reads_it_first(client, wire):
    fake = wire(held(5, inventories={}), response(200, {"resource_provider_generation": 6}))
    assert client.set_inventory(RP, INVENTORY) == 6
    assert fake.calls() == [f"GET /resource_providers/{RP}/inventories",
                            f"PUT /resource_providers/{RP}/inventories"]
    assert fake.body(1) == {"resource_provider_generation": 5, "inventories": INVENTORY}


def test_a_write_of_what_the_provider_holds_is_not_sent(client, wire):
    fake = wire(held(5, aggregates=["b", "a"]))
    assert client.set_aggregates(RP, ["a", "b"]) == 5
    assert fake.calls() == [f"GET /resource_providers/{RP}/aggregates"]


def test_changing_aggregates_keeps_the_others_and_rereads_on_a_conflict(client, wire):
    fake = wire(held(5, aggregates=["keep", "old"]), error(409, CONCURRENT_UPDATE),
                held(7, aggregates=["keep", "old", "theirs"]),
                response(200, {"resource_provider_generation": 8}))
    assert client.change_aggregates(RP, add=["new"], remove=["old"]) == [
        "keep", "new", "theirs"]
    assert fake.body(1) == {"resource_provider_generation": 5, "aggregates": ["keep", "new"]}
    assert fake.body(3) == {"resource_provider_generation": 7,
                            "aggregates": ["keep", "new", "theirs"]}


def test_changing_nothing_sends_nothing(client, wire):
    fake = wire(held(5, aggregates=["a"]))
    assert client.change_aggregates(RP, add=["a"], remove=["b"]) == ["a"]
    assert fake.calls() == [f"GET /resource_providers/{RP}/aggregates"]


def test_a_write_with_a_known_generation_saves_the_read(client, wire):
    fake = wire(response(200, {"resource_provider_generation": 10}))
    assert client.set_aggregates(RP, ["b", "a"], generation=9) == 10
    assert fake.calls() == [f"PUT /resource_providers/{RP}/aggregates"]
    assert fake.body(0) == {"resource_provider_generation": 9, "aggregates": ["a", "b"]}


def test_a_generation_conflict_is_retried_with_a_fresh_generation(client, wire):
    fake = wire(error(409, CONCURRENT_UPDATE), held(8, inventories={}),
                response(200, {"resource_provider_generation": 9}))
    assert client.set_inventory(RP, INVENTORY, generation=7) == 9
    assert [fake.body(i)["resource_provider_generation"] for i in (0, 2)] == [7, 8]
    assert fake.calls()[1] == f"GET /resource_providers/{RP}/inventories"


def test_a_conflict_ends_when_the_provider_holds_it_already(client, wire):
    """A restart writes the inventory the provider has; claims move the generation meanwhile."""
    fake = wire(error(409, CONCURRENT_UPDATE), held(8, inventories=INVENTORY))
    assert client.set_inventory(RP, INVENTORY, generation=7) == 8
    assert [call.split()[0] for call in fake.calls()] == ["PUT", "GET"]


def test_generation_conflicts_give_up_after_the_retries(client, wire):
    answers = []
    for generation in range(GENERATION_RETRIES):
        answers += [held(generation, inventories={}), error(409, CONCURRENT_UPDATE)]
    fake = wire(*answers)
    with pytest.raises(ConflictError) as caught:
        client.set_inventory(RP, INVENTORY)
    assert caught.value.code == CONCURRENT_UPDATE
    assert "generation kept changing" in str(caught.value)
    puts = [call for call in fake.calls() if call.startswith("PUT")]
    assert len(puts) == GENERATION_RETRIES
    assert fake.answers == []


def test_other_conflicts_are_not_retried(client, wire):
    fake = wire(error(409, "placement.inventory.inuse", "inventory in use"))
    with pytest.raises(ConflictError) as caught:
        client.set_inventory(RP, {}, generation=1)
    assert caught.value.code == "placement.inventory.inuse"
    assert len(fake.sent) == 1


def test_a_write_to_a_missing_provider_is_not_found(client, wire):
    wire(error(404))
    with pytest.raises(NotFound, match=f"resource provider {RP} does not exist"):
        client.set_traits(RP, set())


def test_set_traits_creates_custom_traits_once_then_writes_them_sorted(client, wire):
    fake = wire(response(201), response(200, {"resource_provider_generation": 2}),
                response(200, {"resource_provider_generation": 3}))
    client.set_traits(RP, {"HW_CPU_X86_AVX2", "CUSTOM_FAST"}, generation=1)
    client.set_traits(RP, {"CUSTOM_FAST"}, generation=2)
    assert fake.calls() == ["PUT /traits/CUSTOM_FAST", f"PUT /resource_providers/{RP}/traits",
                            f"PUT /resource_providers/{RP}/traits"]
    assert fake.body(1)["traits"] == ["CUSTOM_FAST", "HW_CPU_X86_AVX2"]


def test_known_traits_asks_once_and_not_at_all_for_none(client, wire):
    fake = wire(response(200, {"traits": ["HW_CPU_X86_AVX2"]}))
    assert client.known_traits(set()) == set()
    assert client.known_traits({"HW_CPU_X86_AVX2", "HW_CPU_X86_NOPE"}) == {"HW_CPU_X86_AVX2"}
    assert fake.calls() == ["GET /traits?name=in%3AHW_CPU_X86_AVX2%2CHW_CPU_X86_NOPE"]


# ------------------------------------------------------------------ providers


def test_ensure_provider_reuses_one_with_the_same_name(client, wire):
    fake = wire(provider(name="host-a"))
    assert client.ensure_provider(RP, "host-a")["generation"] == 5
    assert fake.calls() == [f"GET /resource_providers/{RP}"]


def test_ensure_provider_renames_one_with_another_name(client, wire):
    fake = wire(provider(name="old"), provider(name="host-a", generation=6))
    assert client.ensure_provider(RP, "host-a")["name"] == "host-a"
    assert fake.calls()[1] == f"PUT /resource_providers/{RP}"
    assert fake.body(1) == {"name": "host-a"}


def test_ensure_provider_creates_a_missing_one(client, wire):
    fake = wire(error(404), provider(generation=0))
    assert client.ensure_provider(RP, "host-a") == {"uuid": RP, "name": "host-a",
                                                    "generation": 0}
    assert fake.calls()[1] == "POST /resource_providers"
    assert fake.body(1) == {"uuid": RP, "name": "host-a"}


def test_ensure_provider_refuses_a_name_another_provider_holds(client, wire):
    wire(error(404), error(409, detail="Conflicting resource provider name"),
         response(200, {"resource_providers": [{"uuid": OTHER, "name": "host-a"}]}))
    with pytest.raises(ConflictError) as caught:
        client.ensure_provider(RP, "host-a")
    assert OTHER in str(caught.value) and "set compute.name or compute.uuid" in str(caught.value)


def test_ensure_provider_takes_one_created_meanwhile_by_a_racing_start(client, wire):
    fake = wire(error(404), error(409, detail="Conflicting resource provider uuid"),
                response(200, {"resource_providers": []}), provider(generation=1))
    assert client.ensure_provider(RP, "host-a")["generation"] == 1
    assert fake.calls()[-1] == f"GET /resource_providers/{RP}"


def test_ensure_provider_says_so_if_the_provider_vanished(client, wire):
    wire(error(404), error(409), response(200, {"resource_providers": []}), error(404))
    with pytest.raises(PlacementError, match="vanished"):
        client.ensure_provider(RP, "host-a")


def test_check_describes_the_versions(client, wire):
    wire(response(200, {"versions": [{"min_version": "1.0", "max_version": "1.39"}]}))
    assert client.check() == f"Placement 1.0..1.39 at {ENDPOINT}"
