"""The etcd key layout: where each message lives, what counts as a host key, what a uuid is."""

from __future__ import annotations

import uuid as uuidlib

import pytest

from etcd_compute import keys
from etcd_compute.keys import HostKey, Keys

RP = "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10"
INSTANCE = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


@pytest.mark.parametrize("prefix", ["", "/test-abc", "/a/b"])
def test_every_key_sits_under_the_prefix_in_the_documented_layout(prefix):
    k = Keys(prefix)
    # One host's keys.
    assert k.hosts() == f"{prefix}/hosts/"
    assert k.host(RP) == f"{prefix}/hosts/{RP}/"
    assert k.specs(RP) == f"{prefix}/hosts/{RP}/specs/"
    assert k.spec(RP, INSTANCE) == f"{prefix}/hosts/{RP}/specs/{INSTANCE}"
    assert k.records(RP) == f"{prefix}/hosts/{RP}/instances/"
    assert k.record(RP, INSTANCE) == f"{prefix}/hosts/{RP}/instances/{INSTANCE}"
    assert k.booted(RP, INSTANCE) == f"{prefix}/hosts/{RP}/booted/{INSTANCE}"
    assert k.console(RP, INSTANCE) == f"{prefix}/hosts/{RP}/console/{INSTANCE}"
    assert k.alive_prefix() == f"{prefix}/alive/"
    assert k.alive(RP) == f"{prefix}/alive/{RP}"
    assert k.stats_prefix() == f"{prefix}/stats/"
    assert k.stats(RP) == f"{prefix}/stats/{RP}"
    # The operator's keys.
    assert k.locations() == f"{prefix}/instances/"
    assert k.location(INSTANCE) == f"{prefix}/instances/{INSTANCE}"
    assert k.groups() == f"{prefix}/groups/"
    assert k.group("web") == f"{prefix}/groups/web/"
    assert k.group_member("web", INSTANCE) == f"{prefix}/groups/web/{INSTANCE}"
    assert k.controller() == f"{prefix}/controller/"
    assert k.leader() == f"{prefix}/controller/leader"


def test_per_item_keys_are_inside_their_listing_prefix():
    k = Keys("/p")
    assert k.spec(RP, INSTANCE).startswith(k.specs(RP))
    assert k.record(RP, INSTANCE).startswith(k.records(RP))
    assert k.specs(RP).startswith(k.host(RP)) and k.records(RP).startswith(k.host(RP))
    assert k.host(RP).startswith(k.hosts())
    assert k.location(INSTANCE).startswith(k.locations())
    assert k.alive(RP).startswith(k.alive_prefix())
    assert k.stats(RP).startswith(k.stats_prefix())
    assert k.group_member("g", INSTANCE).startswith(k.group("g"))
    assert k.group("g").startswith(k.groups())
    assert k.leader().startswith(k.controller())


def test_every_key_a_host_writes_for_an_instance_is_under_its_own_prefix():
    # What a host's etcd role is given: its /hosts/<rp>/ prefix, and nothing of the operator's.
    k = Keys("/p")
    own = [k.spec(RP, INSTANCE), k.record(RP, INSTANCE), k.booted(RP, INSTANCE),
           k.console(RP, INSTANCE), k.events(RP, INSTANCE)]
    assert all(key.startswith(k.host(RP)) for key in own)
    other = "11111111-2222-4333-8444-555555555555"
    assert not any(key.startswith(k.host(other)) for key in own)
    for operator_key in (k.location(INSTANCE), k.group_member("g", INSTANCE), k.leader()):
        assert not operator_key.startswith(k.hosts())


def test_listing_prefixes_of_kinds_do_not_overlap():
    k = Keys("/p")
    kinds = [k.specs(RP), k.records(RP), f"{k.host(RP)}booted/", f"{k.host(RP)}console/",
             f"{k.host(RP)}events/"]
    for a in kinds:
        for b in kinds:
            assert a == b or not a.startswith(b)
    assert not k.locations().startswith(k.hosts()) and not k.hosts().startswith(k.locations())


@pytest.mark.parametrize("kind", keys.HOST_KINDS)
def test_every_host_key_parses_back_to_its_provider_kind_and_instance(kind):
    k = Keys("/p")
    key = {keys.SPECS: k.spec, keys.RECORDS: k.record, keys.BOOTED: k.booted,
           keys.CONSOLE: k.console, keys.EVENTS: k.events,
           keys.EXTERNAL_EVENTS: k.external_events, keys.PASSWORD: k.password}[kind](RP, INSTANCE)
    assert k.parse_host_key(key) == HostKey(RP, kind, INSTANCE)


def test_a_spec_key_parses_back_to_its_provider_and_instance():
    k = Keys("/p")
    assert k.parse_spec(k.spec(RP, INSTANCE)) == (RP, INSTANCE)


@pytest.mark.parametrize("key", [
    f"/hosts/{RP}/instances/{INSTANCE}",  # the host's record, not its spec
    f"/hosts/{RP}/booted/{INSTANCE}",
    f"/hosts/{RP}/console/{INSTANCE}",
])
def test_other_host_keys_are_not_specs(key):
    assert Keys().parse_host_key(key) is not None
    assert Keys().parse_spec(key) is None


@pytest.mark.parametrize(
    "key",
    [
        f"/hosts/{RP}/specs/{INSTANCE}/extra",  # an extra segment
        f"/hosts/{RP}/specs",  # no instance segment
        f"/hosts/{RP}/specs/",  # the listing prefix of a kind: an empty instance segment
        f"/hosts/{RP}/{INSTANCE}",  # the old layout: no kind segment
        f"/hosts/{RP}/unknown/{INSTANCE}",  # not a kind of host key
        f"/hosts/{RP}",
        f"/hosts/{RP}/",
        "/hosts/",  # the listing prefix itself
        f"/hosts/{RP}/specs/{INSTANCE}/",  # trailing slash: an extra (empty) segment
        f"/hosts//specs/{INSTANCE}",  # an empty provider segment
        f"/hosts/{RP}//{INSTANCE}",  # an empty kind segment
        f"/instances/{INSTANCE}",  # another kind of key
        f"/booted/{RP}/{INSTANCE}",
        f"/other/hosts/{RP}/specs/{INSTANCE}",  # /hosts/ not at the start
        f"hosts/{RP}/specs/{INSTANCE}",  # no leading slash
        f"/hostsx/{RP}/specs/{INSTANCE}",
        "",
    ],
)
def test_keys_that_are_not_exactly_hosts_rp_kind_instance_do_not_parse(key):
    assert Keys().parse_host_key(key) is None
    assert Keys().parse_spec(key) is None


def test_another_deployments_prefix_does_not_parse():
    ours, theirs = Keys("/p"), Keys("/pp")
    assert ours.parse_host_key(theirs.spec(RP, INSTANCE)) is None
    assert ours.parse_host_key(Keys().spec(RP, INSTANCE)) is None
    assert Keys().parse_host_key(ours.spec(RP, INSTANCE)) is None
    assert ours.parse_spec(theirs.spec(RP, INSTANCE)) is None


@pytest.mark.parametrize(
    ("key", "parsed"),
    [
        ("/hosts/../specs/x", HostKey("..", "specs", "x")),
        ("/hosts/a/specs/..", HostKey("a", "specs", "..")),
        (f"/hosts/not-a-uuid/console/{INSTANCE}", HostKey("not-a-uuid", "console", INSTANCE)),
    ],
)
def test_odd_non_empty_segments_are_split_not_judged(key, parsed):
    # The parser only splits (and refuses empty segments and unknown kinds): the daemon keeps
    # a key only if the provider is one of its own, and the state machine refuses an
    # instance segment that is not a uuid.
    assert Keys().parse_host_key(key) == parsed


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


def test_everything_of_ours_is_under_one_prefix():
    keys = Keys("/p")
    assert keys.everything() == "/p/"
    for key in (keys.spec("h", "u"), keys.alive("h"), keys.queue_open(), keys.leader(),
                keys.location("u"), keys.zone("z")):
        assert key.startswith(keys.everything())
    assert Keys("").everything() == "/"
