"""Flavors: anyone lists and shows public ones; admins create, describe, delete and set
extra specs; ids and names are unique (409)."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_admins_create_and_everyone_lists_and_shows():
    harness = Harness.new()
    body = {"flavor": {"name": "m1.big", "ram": 4096, "vcpus": 4, "disk": 40, "id": "big",
                       "swap": 512, "OS-FLV-EXT-DATA:ephemeral": 10}}
    assert harness.call("POST", "/v2.1/flavors", body).status_int == 403
    made = harness.admin("POST", "/v2.1/flavors", body)
    assert made.status_int == 200 and made.json["flavor"]["swap"] == 512
    assert harness.admin("POST", "/v2.1/flavors", body).status_int == 409
    other = harness.admin("POST", "/v2.1/flavors", {"flavor": {**body["flavor"], "id": "x"}})
    assert other.json["conflictingRequest"]["message"] == \
        "Flavor with name m1.big already exists."
    listed = harness.call("GET", "/v2.1/flavors").json["flavors"]
    assert [f["id"] for f in listed] == ["big"] and set(listed[0]) == {"id", "name", "links"}
    shown = harness.call("GET", "/v2.1/flavors/big", version="2.75").json["flavor"]
    assert (shown["ram"], shown["OS-FLV-EXT-DATA:ephemeral"], shown["description"]) == \
        (4096, 10, None)
    assert harness.call("GET", "/v2.1/flavors/none").status_int == 404


def test_an_id_is_made_when_none_is_given_and_swap_reads_as_nova_does():
    harness = Harness.new()
    made = harness.admin("POST", "/v2.1/flavors", {"flavor": {
        "name": "auto", "ram": 64, "vcpus": 1, "disk": 1, "id": "auto"}}).json["flavor"]
    assert len(made["id"]) == 36 and made["swap"] == ""
    assert harness.call("GET", f"/v2.1/flavors/{made['id']}",
                        version="2.75").json["flavor"]["swap"] == 0


def test_private_flavors_are_the_admins_and_filters_sort_and_page():
    harness = Harness.new()
    for flavor_id, ram, public in (("a", 512, True), ("b", 128, True), ("c", 256, False)):
        harness.add_flavor(flavor_id, f"f-{flavor_id}", ram=ram, is_public=public)
    assert [f["id"] for f in harness.call("GET", "/v2.1/flavors").json["flavors"]] == \
        ["a", "b"]
    assert harness.call("GET", "/v2.1/flavors/c").status_int == 404
    everything = harness.admin("GET", "/v2.1/flavors?is_public=none").json["flavors"]
    assert [f["id"] for f in everything] == ["a", "b", "c"]
    by_ram = harness.call("GET", "/v2.1/flavors/detail?sort_key=memory_mb&minRam=200")
    assert [f["id"] for f in by_ram.json["flavors"]] == ["a"]
    page = harness.call("GET", "/v2.1/flavors?limit=1").json
    assert [f["id"] for f in page["flavors"]] == ["a"]
    assert page["flavors_links"][0]["href"].endswith("limit=1&marker=a")
    assert harness.call("GET", "/v2.1/flavors?minRam=x").status_int == 400
    assert harness.call("GET", "/v2.1/flavors?bogus=1", version="2.75").status_int == 400


def test_description_from_2_55_and_delete():
    harness = Harness.new()
    harness.add_flavor("1")
    assert harness.admin("PUT", "/v2.1/flavors/1", {"flavor": {"description": "d"}},
                         version="2.54").status_int == 404
    updated = harness.admin("PUT", "/v2.1/flavors/1", {"flavor": {"description": "small"}},
                            version="2.55")
    assert updated.json["flavor"]["description"] == "small"
    assert harness.call("DELETE", "/v2.1/flavors/1").status_int == 403
    assert harness.admin("DELETE", "/v2.1/flavors/1").status_int == 202
    assert harness.admin("DELETE", "/v2.1/flavors/1").status_int == 404
    assert harness.store.get(harness.store.keys.flavor_name("m1.tiny")) is None


def test_extra_specs_are_checked_and_shown_from_2_61():
    harness = Harness.new()
    harness.add_flavor("1")
    url = "/v2.1/flavors/1/os-extra_specs"
    specs = {"extra_specs": {"trait:CUSTOM_SSD": "required", "resources:VCPU": "2",
                             "hw:cpu_policy": "shared"}}
    assert harness.call("POST", url, specs).status_int == 403
    assert harness.admin("POST", url, specs).json == specs
    assert harness.admin("POST", url, {"extra_specs": {"trait:X": "maybe"}}).status_int == 400
    assert harness.admin("POST", url, {"extra_specs": {"resources:VCPU": "two"}}
                         ).status_int == 400
    assert harness.call("GET", url + "/trait:CUSTOM_SSD").json == \
        {"trait:CUSTOM_SSD": "required"}
    assert harness.admin("PUT", url + "/hw:cpu_policy", {"hw:cpu_policy": "dedicated"}
                         ).status_int == 200
    assert harness.admin("PUT", url + "/a", {"b": "c"}).status_int == 400
    assert harness.admin("DELETE", url + "/resources:VCPU").status_int == 200
    assert harness.call("GET", url + "/resources:VCPU").status_int == 404
    shown = harness.call("GET", "/v2.1/flavors/1", version="2.61").json["flavor"]
    assert shown["extra_specs"] == {"trait:CUSTOM_SSD": "required",
                                    "hw:cpu_policy": "dedicated"}
    assert "extra_specs" not in harness.call("GET", "/v2.1/flavors/1",
                                             version="2.60").json["flavor"]
