"""The etcd key layout: where each message lives, what counts as a host key, what a uuid is."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import keys
from etcd_compute.keys import Keys

RP = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
INSTANCE = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


@pytest.mark.parametrize("prefix", ["", "/test-abc", "/a/b"])
def test_every_key_sits_under_the_prefix_in_the_documented_layout(prefix):
    k = Keys(prefix)
    assert k.hosts() == f"{prefix}/hosts/"
    assert k.host(RP) == f"{prefix}/hosts/{RP}/"
    assert k.host_instance(RP, INSTANCE) == f"{prefix}/hosts/{RP}/{INSTANCE}"
    assert k.instances() == f"{prefix}/instances/"
    assert k.instance(INSTANCE) == f"{prefix}/instances/{INSTANCE}"
    assert k.booted(INSTANCE) == f"{prefix}/booted/{INSTANCE}"
    assert k.alive_prefix() == f"{prefix}/alive/"
    assert k.alive(RP) == f"{prefix}/alive/{RP}"
    assert k.stats_prefix() == f"{prefix}/stats/"
    assert k.stats(RP) == f"{prefix}/stats/{RP}"
    assert k.group("web") == f"{prefix}/groups/web/"
    assert k.group_member("web", INSTANCE) == f"{prefix}/groups/web/{INSTANCE}"
    assert k.console(INSTANCE) == f"{prefix}/console/{INSTANCE}"


def test_per_item_keys_are_inside_their_listing_prefix():
    k = Keys("/p")
    assert k.host_instance(RP, INSTANCE).startswith(k.host(RP))
    assert k.host(RP).startswith(k.hosts())
    assert k.instance(INSTANCE).startswith(k.instances())
    assert k.alive(RP).startswith(k.alive_prefix())
    assert k.stats(RP).startswith(k.stats_prefix())
    assert k.group_member("g", INSTANCE).startswith(k.group("g"))


def test_a_host_key_parses_back_to_its_provider_and_instance():
    k = Keys("/p")
    assert k.parse_host_instance(k.host_instance(RP, INSTANCE)) == (RP, INSTANCE)


@pytest.mark.parametrize(
    "key",
    [
        f"/hosts/{RP}/{INSTANCE}/extra",  # an extra segment
        f"/hosts/{RP}",  # no instance segment
        "/hosts/",  # the listing prefix itself
        f"/hosts/{RP}/{INSTANCE}/",  # trailing slash: an extra (empty) segment
        f"/instances/{INSTANCE}",  # another kind of key
        f"/booted/{RP}/{INSTANCE}",
        f"/other/hosts/{RP}/{INSTANCE}",  # /hosts/ not at the start
        f"hosts/{RP}/{INSTANCE}",  # no leading slash
        f"/hostsx/{RP}/{INSTANCE}",
        "",
    ],
)
def test_keys_that_are_not_exactly_hosts_rp_instance_do_not_parse(key):
    assert Keys().parse_host_instance(key) is None


def test_another_deployments_prefix_does_not_parse():
    ours, theirs = Keys("/p"), Keys("/pp")
    assert ours.parse_host_instance(theirs.host_instance(RP, INSTANCE)) is None
    assert ours.parse_host_instance(Keys().host_instance(RP, INSTANCE)) is None
    assert Keys().parse_host_instance(ours.host_instance(RP, INSTANCE)) is None


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        (f"/hosts//{INSTANCE}", ("", INSTANCE)),
        (f"/hosts/{RP}/", (RP, "")),
        ("/hosts/../x", ("..", "x")),
        ("/hosts/a/..", ("a", "..")),
    ],
)
def test_odd_segments_are_split_not_judged(key, parsed):
    # The parser only splits: the daemon keeps a key only if the provider is one of its own,
    # and the state machine refuses an instance segment that is not a uuid.
    assert Keys().parse_host_instance(key) == parsed


def test_uuid_accepts_canonical_lower_case_uuids():
    for _ in range(20):
        assert keys.UUID.match(str(uuidlib.uuid4()))
    assert keys.UUID.match("00000000-0000-0000-0000-000000000000")


@pytest.mark.parametrize(
    "text",
    [
        INSTANCE.upper(),
        INSTANCE + "\n",  # `$` would have let this through
        "\n" + INSTANCE,
        INSTANCE + " ",
        INSTANCE.replace("-", ""),
        "{" + INSTANCE + "}",
        "urn:uuid:" + INSTANCE,
        INSTANCE[:-1],
        INSTANCE + "0",
        INSTANCE[:8] + "_" + INSTANCE[9:],
        "../" + INSTANCE,
        INSTANCE[:-1] + "g",
        "",
    ],
)
def test_uuid_refuses_anything_else(text):
    assert keys.UUID.match(text) is None
