"""RequestSpec.build checks every option locally; instance names; Destination.as_dict."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute.errors import UsageError
from etcd_compute.scheduler.spec import Destination, RequestSpec, for_instance

QUERY = "resources=VCPU:1,MEMORY_MB:256"
AGG = "5b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1d"
UUID = "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d"


def test_build_keeps_every_option_and_parses_the_query():
    spec = RequestSpec.build(QUERY, count=3, name="web", image_url="file:///img.qcow2",
                             user_data="#cloud-config", ssh_key="ssh-ed25519 AAAA",
                             group=("g1", "anti-affinity"))
    assert spec.request.resources == {"VCPU": 1, "MEMORY_MB": 256}
    assert (spec.count, spec.name, spec.image_url) == (3, "web", "file:///img.qcow2")
    assert (spec.user_data, spec.ssh_key) == ("#cloud-config", "ssh-ed25519 AAAA")
    assert spec.group == ("g1", "anti-affinity") and spec.zone is None


def test_build_rejects_a_bad_query_before_anything_else():
    with pytest.raises(UsageError, match="bad amount 'x'"):
        RequestSpec.build("resources=VCPU:x", count=0)


@pytest.mark.parametrize("count", [0, -1, 1001, "3", 2.0, None])
def test_count_outside_1_to_1000_or_not_an_int_is_refused(count):
    with pytest.raises(UsageError, match=r"--count .*: expected 1\.\.1000"):
        RequestSpec.build(QUERY, count=count)


@pytest.mark.parametrize("count", [1, 1000])
def test_count_limits_are_inclusive(count):
    assert RequestSpec.build(QUERY, count=count).count == count


def test_name_with_count_suffix_must_fit_63_characters():
    name = "a" * 61
    assert RequestSpec.build(QUERY, name=name, count=9).name == name  # "aaa...-9": 63
    with pytest.raises(UsageError, match="at most 63 characters"):
        RequestSpec.build(QUERY, name=name, count=10)  # "aaa...-10": 64
    assert RequestSpec.build(QUERY, name="b" * 63).name == "b" * 63
    with pytest.raises(UsageError, match="--name"):
        RequestSpec.build(QUERY, name="b" * 64)


@pytest.mark.parametrize("name", ["-web", "web server", "wéb", "", "a/b"])
def test_names_are_letters_digits_and_dot_dash_underscore(name):
    with pytest.raises(UsageError, match="--name"):
        RequestSpec.build(QUERY, name=name)


@pytest.mark.parametrize("url", ["ftp://x/y", "file://", "http://a b", "/tmp/img", "HTTP://x"])
def test_image_must_be_an_http_https_or_file_url(url):
    with pytest.raises(UsageError, match="--image .*expected an http"):
        RequestSpec.build(QUERY, image_url=url)


@pytest.mark.parametrize("url", ["http://h/i.img", "https://h/i.img", "file:///tmp/i.img"])
def test_image_urls_accepted(url):
    assert RequestSpec.build(QUERY, image_url=url).image_url == url


def test_group_policy_and_name_are_checked():
    with pytest.raises(UsageError, match="--hint sticky: expected affinity, anti-affinity, "
                                         "soft-affinity, soft-anti-affinity"):
        RequestSpec.build(QUERY, group=("g", "sticky"))
    with pytest.raises(UsageError, match="group names are 1-64"):
        RequestSpec.build(QUERY, group=("bad name", "affinity"))
    with pytest.raises(UsageError, match="group names are 1-64"):
        RequestSpec.build(QUERY, group=("g" * 65, "affinity"))
    assert RequestSpec.build(QUERY, group=("g" * 64, "affinity")).group == ("g" * 64, "affinity")


def test_an_anti_affinity_groups_max_per_host_travels_with_the_group():
    spec = RequestSpec.build(QUERY, group=("g", "anti-affinity"), group_max=3)
    assert spec.group_message() == {"name": "g", "policy": "anti-affinity", "max_per_host": 3}
    assert RequestSpec.build(QUERY, group=("g", "soft-affinity")).group_message() == {
        "name": "g", "policy": "soft-affinity"}
    for group, most in ((("g", "affinity"), 2), (("g", "anti-affinity"), 0), (None, 2)):
        with pytest.raises(UsageError, match="max_server_per_host"):
            RequestSpec.build(QUERY, group=group, group_max=most)


def test_zone_must_be_a_uuid_and_becomes_member_of():
    with pytest.raises(UsageError, match="--zone 'eu': expected an aggregate uuid"):
        RequestSpec.build(QUERY, zone="eu")
    spec = RequestSpec.build(QUERY, zone=AGG)
    assert spec.zone == AGG
    assert spec.request.groups[""].member_of == [[AGG]]
    assert f"member_of={AGG}" in spec.request.to_query()


def test_user_data_and_key_size_limits():
    assert RequestSpec.build(QUERY, user_data="x" * 65536).user_data == "x" * 65536
    with pytest.raises(UsageError, match="--user-data: larger than 64 KiB"):
        RequestSpec.build(QUERY, user_data="x" * 65537)
    assert RequestSpec.build(QUERY, ssh_key="k" * 16384).ssh_key == "k" * 16384
    with pytest.raises(UsageError, match="--key: larger than 16 KiB"):
        RequestSpec.build(QUERY, ssh_key="k" * 16385)


def test_instance_name_without_a_name_uses_the_uuid():
    spec = RequestSpec.build(QUERY, count=2)
    assert spec.instance_name(0, UUID) == "instance-8ad8abc4"
    assert spec.instance_name(1, UUID) == "instance-8ad8abc4"


def test_instance_name_is_the_name_alone_for_one_and_numbered_from_1_for_several():
    assert RequestSpec.build(QUERY, name="web").instance_name(0, UUID) == "web"
    batch = RequestSpec.build(QUERY, name="web", count=3)
    assert [batch.instance_name(i, UUID) for i in range(3)] == ["web-1", "web-2", "web-3"]


def test_destination_as_dict_has_every_field():
    allocations = {"rp": {"resources": {"VCPU": 1}}}
    alternates = [{"host": "rp2", "allocations": {"rp2": {"resources": {"VCPU": 1}}}}]
    destination = Destination(UUID, "web", "rp", "host-a", allocations, alternates)
    assert destination.as_dict() == {"uuid": UUID, "name": "web", "host": "rp",
                                     "host_name": "host-a", "allocations": allocations,
                                     "alternates": alternates}
    assert Destination(UUID, "web", "rp", "host-a", allocations).as_dict()["alternates"] == []


@pytest.mark.parametrize(("query", "missing"), [
    ("resources=VCPU:1,DISK_GB:1", "MEMORY_MB"),
    ("resources=MEMORY_MB:256", "VCPU, DISK_GB"),
    ("resources=VCPU:1,MEMORY_MB:256&resources1=CUSTOM_X:1", "DISK_GB"),
])
def test_a_request_without_a_required_class_is_refused(query, missing):
    with pytest.raises(UsageError) as caught:
        RequestSpec.build(query, required_resources=("VCPU", "MEMORY_MB", "DISK_GB"))
    assert str(caught.value).startswith(f"resources: {missing} missing")


def test_required_classes_may_come_from_any_request_group():
    spec = RequestSpec.build("resources=VCPU:1,MEMORY_MB:256&resources1=DISK_GB:5",
                             required_resources=("VCPU", "MEMORY_MB", "DISK_GB"))
    assert spec.request.resources["DISK_GB"] == 5


@pytest.mark.parametrize("url", ["file:///img\n", "http://h/\x1b[2J", "https://h/" + "a" * 2048,
                                 "http://h/a b", "ftp://h/i"])
def test_an_image_url_is_printable_ascii_and_bounded(url):
    with pytest.raises(UsageError, match="--image"):
        RequestSpec.build(QUERY, image_url=url)


def test_owner_is_the_requests_else_the_configured_and_ids_are_checked():
    settings = {"project_id": "ops", "user_id": "root"}
    assert RequestSpec.build(QUERY).owner(settings) == ("ops", "root")
    assert RequestSpec.build(QUERY, project_id="demo", user_id="ann").owner(settings) == \
        ("demo", "ann")
    with pytest.raises(UsageError, match="project id"):
        RequestSpec.build(QUERY, project_id="de mo")
    with pytest.raises(UsageError, match="uuids"):
        RequestSpec.build(QUERY, count=2, uuids=[str(uuidlib.uuid4())] * 2)


@pytest.mark.parametrize("networks,groups", [
    ("auto", None), ([{"uuid": 7}], None), ([{}], None), ([{"network": "x"}], None),
    ([{"uuid": "x"}] * 17, None), (None, ["web"]), (None, "default"),
])
def test_networks_and_groups_of_another_shape_are_refused(networks, groups):
    with pytest.raises(UsageError):
        RequestSpec.build("resources=VCPU:1", networks=networks, security_groups=groups)


def test_an_instance_is_placed_again_without_its_creates_destination():
    """The unnumbered `in_tree` of the create (its host, named) is dropped, as Nova keeps
    no requested_destination; a zone, traits and granular trees stay; a move's named host
    becomes the one tree."""
    host, other = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    query = (f"{QUERY}&required=CUSTOM_A&member_of={AGG}&in_tree={host}"
             f"&resources1=VGPU:1&in_tree1={AGG}")
    again = for_instance({"uuid": "u", "query": query}).request
    assert again.groups[""].in_tree is None and again.groups["1"].in_tree == AGG
    assert again.groups[""].member_of == [[AGG]]
    assert again.groups[""].required_all == ["CUSTOM_A"]
    moved = for_instance({"uuid": "u", "query": query}, destination=other).request
    assert moved.groups[""].in_tree == other and f"in_tree={other}" in moved.to_query()
    granular = for_instance({"uuid": "u", "query": "resources1=VCPU:1&resources2=MEMORY_MB:1"},
                            destination=other).request
    assert [g.in_tree for g in granular.groups.values()] == [other, other]
    assert "resources=&" not in granular.to_query()
