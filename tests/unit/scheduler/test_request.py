"""The query parser: Placement's syntax accepted, every fault a one-line UsageError."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etcd_compute.errors import UsageError
from etcd_compute.scheduler.request import parse_query
from etcd_compute.scheduler.spec import RequestSpec

AGG = "5b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1d"
AGG2 = "1b3a2c1d-0e9f-4a8b-8c7d-6e5f4a3b2c1d"


def test_full_syntax_round_trips_to_placement_query():
    request = parse_query(
        "resources=VCPU:2,MEMORY_MB:512&required=HW_CPU_X86_AVX2,!CUSTOM_SLOW"
        f"&required=in:CUSTOM_A,CUSTOM_B&member_of=in:{AGG},{AGG2}&member_of=!{AGG2}"
        f"&in_tree={AGG}&resources1=VGPU:1&required1=CUSTOM_GPU"
        "&resources_NET=CUSTOM_BW:100&group_policy=isolate&limit=7"
    )
    unnumbered = request.groups[""]
    assert unnumbered.resources == {"VCPU": 2, "MEMORY_MB": 512}
    assert unnumbered.required_all == ["HW_CPU_X86_AVX2"]
    assert unnumbered.forbidden == ["CUSTOM_SLOW"]
    assert unnumbered.required_any == [["CUSTOM_A", "CUSTOM_B"]]
    assert unnumbered.member_of == [[AGG, AGG2]]
    assert unnumbered.forbidden_aggregates == [AGG2]
    assert request.groups["1"].required_all == ["CUSTOM_GPU"]
    assert request.groups["_NET"].resources == {"CUSTOM_BW": 100}
    assert request.resources == {"VCPU": 2, "MEMORY_MB": 512, "VGPU": 1, "CUSTOM_BW": 100}
    query = request.to_query(limit=100)
    assert "limit=7" in query  # the request's own smaller limit wins
    assert "required=in:CUSTOM_A,CUSTOM_B" in query and "group_policy=isolate" in query
    assert parse_query(query).to_query() == query


def test_several_granular_groups_get_a_default_policy():
    query = parse_query("resources1=VCPU:1&resources2=VCPU:1").to_query()
    assert "group_policy=none" in query


@pytest.mark.parametrize("text, fault", [
    ("", "empty query"),
    ("VCPU:1", "malformed parameter 'VCPU:1'"),
    ("resources=VCPU", "malformed pair 'VCPU'"),
    ("resources=VCPU:0", "amount 0 for VCPU out of range"),
    ("resources=VCPU:-1", "bad amount '-1'"),
    ("resources=VCPU:1.5", "bad amount '1.5'"),
    ("resources=VCPU:99999999999", "bad amount"),
    ("resources=vcpu:1", "bad resource class 'vcpu'"),
    ("resources=VCPU:1,VCPU:2", "VCPU given twice"),
    ("resources=VCPU:1&flavor=small", "unknown key 'flavor'"),
    ("resources=VCPU:1&&limit=1", "empty parameter"),
    ("resources=VCPU:1&required=hw_avx", "bad trait 'hw_avx'"),
    ("resources=VCPU:1&required=A,!A", "both required and forbidden"),
    ("resources=VCPU:1&member_of=not-a-uuid", "bad aggregate uuid"),
    (f"resources=VCPU:1&member_of={AGG},{AGG2}", "several aggregates need in:"),
    ("resources=VCPU:1&in_tree=x", "not a resource provider uuid"),
    ("resources=VCPU:1&group_policy=spread", "not one of none, isolate"),
    ("resources=VCPU:1&limit=0", "limit: '0' is not a positive integer"),
    ("resources=VCPU:1&limit=1&limit=2", "limit: given twice"),
    ("required=CUSTOM_X", "resources missing"),
    ("resources=VCPU:1&required1=CUSTOM_X", "resources1 missing"),
])
def test_faults_are_named_in_one_line(text, fault):
    with pytest.raises(UsageError) as caught:
        parse_query(text)
    message = str(caught.value)
    assert fault in message
    assert "\n" not in message and caught.value.exit_code == 2


def test_zone_becomes_member_of_and_options_are_checked():
    spec = RequestSpec.build("resources=VCPU:1", zone=AGG)
    assert f"member_of={AGG}" in spec.request.to_query()
    with pytest.raises(UsageError, match="--zone 'eu': expected an aggregate uuid"):
        RequestSpec.build("resources=VCPU:1", zone="eu")
    with pytest.raises(UsageError, match="--count 0"):
        RequestSpec.build("resources=VCPU:1", count=0)
    with pytest.raises(UsageError, match="--hint sticky"):
        RequestSpec.build("resources=VCPU:1", group=("g", "sticky"))
    with pytest.raises(UsageError, match="--image"):
        RequestSpec.build("resources=VCPU:1", image_url="ftp://x")


QUERY_ALPHABET = st.sampled_from(list("resourcquidmb_ntlpyfgVCPUMEMORYDISKGB0123456789:,=&!%-"))
QUERY_WORDS = st.sampled_from(["resources", "required", "member_of", "in_tree", "limit",
                               "group_policy", "=", "&", ",", ":", "!", "in:", "VCPU", "1",
                               "0", "-1", "CUSTOM_X", AGG, "isolate", "%20", "%26", "1x"])


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=120), st.text(QUERY_ALPHABET, max_size=80),
                 st.lists(QUERY_WORDS, max_size=16).map("".join)))
def test_arbitrary_text_parses_or_raises_one_line_usage_error(text):
    try:
        request = parse_query(text)
    except UsageError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc)
        return
    # Whatever parses renders to a query that parses to the same thing.
    assert parse_query(request.to_query()).to_query() == request.to_query()


@pytest.mark.parametrize("text, fault", [
    ("resources=", "resources: empty"),
    ("resources=VCPU:1&required=", "required: empty"),
    ("resources=VCPU:1,%20MEMORY_MB:1", "whitespace is not allowed"),
    ("resources=VCPU:1&resources=MEMORY_MB:1", "resources: given twice"),
    (f"resources=VCPU:1&in_tree={AGG}&in_tree={AGG}", "in_tree: given twice"),
    ("resources=VCPU:1&required=in:CUSTOM_A,CUSTOM_A", "trait listed twice"),
    (f"resources=VCPU:1&member_of=in:{AGG},{AGG}", "aggregate uuid listed twice"),
    ("resources=VCPU:1&group_policy=none&group_policy=none", "group_policy: given twice"),
    ("resources=VCPU:1&limit=1000000", "limit: '1000000' is not a positive integer"),
    ("resources=VCPU:1&resources.x=VCPU:1", "unknown key 'resources.x'"),
    ("resources=VCPU:1&required=" + "A" * 8200, "query longer than 8192 characters"),
])
def test_more_faults_are_named_in_one_line(text, fault):
    with pytest.raises(UsageError) as caught:
        parse_query(text)
    assert fault in str(caught.value) and "\n" not in str(caught.value)


def test_percent_encoded_query_is_decoded_before_checking():
    request = parse_query("resources=VCPU%3A2%2CMEMORY_MB%3A64&required=%21CUSTOM_SLOW")
    assert request.resources == {"VCPU": 2, "MEMORY_MB": 64}
    assert request.groups[""].forbidden == ["CUSTOM_SLOW"]


def test_repeated_traits_are_kept_once_and_granular_amounts_add_up():
    request = parse_query("resources=VCPU:1&required=CUSTOM_A&required=CUSTOM_A,!CUSTOM_B"
                          "&required=!CUSTOM_B&resources_GPU-1=VCPU:2,VGPU:1")
    assert request.groups[""].required_all == ["CUSTOM_A"]
    assert request.groups[""].forbidden == ["CUSTOM_B"]
    assert request.resources == {"VCPU": 3, "VGPU": 1}


def test_forbidden_aggregates_render_one_parameter_each_and_round_trip():
    request = parse_query(f"resources=VCPU:1&member_of=!in:{AGG},{AGG2}&member_of=!{AGG}")
    assert request.groups[""].forbidden_aggregates == [AGG, AGG2]
    query = request.to_query()
    assert f"member_of=!{AGG}&member_of=!{AGG2}" in query
    assert parse_query(query).to_query() == query


def test_limit_is_the_smaller_of_the_request_and_the_scheduler():
    assert parse_query("resources=VCPU:1&limit=7").to_query(limit=3).endswith("limit=3")
    assert parse_query("resources=VCPU:1&limit=7").to_query().endswith("limit=7")
    assert parse_query("resources=VCPU:1").to_query(limit=50).endswith("limit=50")
    assert "limit" not in parse_query("resources=VCPU:1").to_query()
