"""Message schemas: the compiled fast path agrees with jsonschema, errors are one line."""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.instances.records import new_record
from etcd_compute.schemas import is_valid, validator

RP = str(uuidlib.uuid4())
SPEC = {
    "action": "build", "uuid": str(uuidlib.uuid4()), "name": "web-1", "host": RP,
    "resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1},
    "allocations": {RP: {"resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}},
    "image": {"url": "https://example.org/cirros.img", "sha256": None},
    "user_data": None, "ssh_key": None, "project_id": "p", "user_id": "u", "group": None,
    "alternates": [], "requested_at": time.time(),
}
# A record as the scheduler writes it: the base the record schema's examples mutate.
RECORD = new_record(SPEC, "SCHEDULED", "h")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def test_the_bases_of_the_agreement_checks_are_valid():
    messages.check(messages.INSTANCE_SPEC, SPEC)
    messages.check(messages.INSTANCE_RECORD, RECORD)


def test_a_valid_spec_round_trips():
    assert messages.decode(messages.INSTANCE_SPEC, messages.encode(messages.INSTANCE_SPEC,
                                                                   SPEC)) == SPEC


@pytest.mark.parametrize(
    ("change", "fault"),
    [
        ({"resources": {"VCPU": True}}, "resources.VCPU"),
        ({"resources": {"VCPU": 0}}, "resources.VCPU"),
        ({"resources": {"vcpu": 1}}, "resources"),
        ({"image": {"url": "ftp://x/y"}}, "image.url"),
        ({"action": "teleport"}, "action"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_specs_name_the_fault_in_one_line(change, fault):
    with pytest.raises(InvalidMessage) as error:
        messages.decode(messages.INSTANCE_SPEC, json.dumps({**SPEC, **change}))
    assert fault in str(error.value) and "\n" not in str(error.value)


def _agreement(schema: str, base: dict):
    """A hypothesis check: `base` with one key replaced (or dropped, or added); the compiled
    validator and jsonschema must agree. Returns the check and the outcomes it saw."""
    outcomes: set[bool] = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(key=st.sampled_from([*sorted(base), "surprise"]), value=json_values,
           drop=st.booleans())
    def check(key, value, drop):
        message = {k: v for k, v in base.items() if k != key} if drop else {**base, key: value}
        fast = is_valid(schema, message)
        assert fast == validator(schema).is_valid(message), message
        event(f"valid={fast}")
        outcomes.add(fast)

    return check, outcomes


@pytest.mark.parametrize(("schema", "base"), [(messages.INSTANCE_SPEC, SPEC),
                                              (messages.INSTANCE_RECORD, RECORD)])
def test_compiled_check_agrees_with_jsonschema(schema, base):
    check, outcomes = _agreement(schema, base)
    check()
    # Both outcomes occurred: the agreement was tested on valid and on invalid messages.
    assert outcomes == {True, False}


@pytest.mark.parametrize(
    "raw",
    [b"", b"{", b"not json", b"\xff\xfe", "{'single': 'quotes'}", b"[1, 2"],
)
def test_decode_of_something_not_json_is_a_one_line_error(raw):
    with pytest.raises(InvalidMessage) as error:
        messages.decode(messages.INSTANCE_RECORD, raw)
    text = str(error.value)
    assert text.startswith("instance_record: not valid JSON (") and "\n" not in text


@pytest.mark.parametrize("raw", [b"null", b"[]", b"42", b'"a string"'])
def test_decode_of_json_that_is_not_an_object_is_refused(raw):
    with pytest.raises(InvalidMessage, match="^instance_record: "):
        messages.decode(messages.INSTANCE_RECORD, raw)


def test_decode_accepts_bytes_and_text():
    encoded = messages.encode(messages.INSTANCE_RECORD, RECORD)
    assert messages.decode(messages.INSTANCE_RECORD, encoded) == RECORD
    assert messages.decode(messages.INSTANCE_RECORD, encoded.encode()) == RECORD


def test_encode_is_compact_sorted_json():
    encoded = messages.encode(messages.INSTANCE_RECORD, RECORD)
    assert "\n" not in encoded and ", " not in encoded and ": " not in encoded
    assert encoded == json.dumps(RECORD, sort_keys=True, separators=(",", ":"))


def test_encode_refuses_an_invalid_message_naming_the_key():
    with pytest.raises(InvalidMessage) as error:
        messages.encode(messages.INSTANCE_RECORD, {**RECORD, "state": "RUNNING"})
    assert str(error.value).startswith("instance_record: state: ")


def test_a_missing_required_key_is_named():
    record = {k: v for k, v in RECORD.items() if k != "updated_at"}
    with pytest.raises(InvalidMessage, match="updated_at"):
        messages.check(messages.INSTANCE_RECORD, record)


def test_a_top_level_fault_has_no_dangling_separator():
    with pytest.raises(InvalidMessage) as error:
        messages.check(messages.INSTANCE_RECORD, {**RECORD, "surprise": 1})
    assert str(error.value).startswith("instance_record: ") and ": :" not in str(error.value)


def test_a_very_long_reason_is_shortened_to_one_line():
    huge = {**RECORD, "state": "X" * 5000}
    with pytest.raises(InvalidMessage) as error:
        messages.check(messages.INSTANCE_RECORD, huge)
    assert len(str(error.value)) < 300 and str(error.value).endswith("...")


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (messages.CONSOLE, {"uuid": RP, "text": "boot", "updated_at": 1.0, "truncated": False}),
        (messages.ALIVE, {"host": RP, "name": "h", "since": 1.0, "pid": 1, "driver": "fake"}),
        (messages.SERVER_PASSWORD, {"uuid": RP, "password": "p\u00e4ss\nw0rd=",
                                    "updated_at": 1.0}),
    ],
)
def test_other_messages_round_trip(schema, message):
    assert messages.decode(schema, messages.encode(schema, message)) == message


# -- attacks: what a request or a stored value may not slip past the boundary ----------------

NEWLINE_SUFFIXED = [
    ("uuid", lambda spec: {**spec, "uuid": spec["uuid"] + "\n"}),
    ("host", lambda spec: {**spec, "host": spec["host"] + "\n"}),
    ("resources", lambda spec: {**spec, "resources": {"VCPU\n": 1}}),
    ("group.name", lambda spec: {**spec, "group": {"name": "web\n", "policy": "affinity"}}),
    ("image.sha256", lambda spec: {**spec, "image": {"url": "http://x/i", "sha256": "a" * 64
                                                      + "\n"}}),
    ("allocations", lambda spec: {**spec, "allocations": {spec["host"] + "\n": {
        "resources": {"VCPU": 1}}}}),
]


@pytest.mark.parametrize(("field", "change"), NEWLINE_SUFFIXED,
                         ids=[f for f, _ in NEWLINE_SUFFIXED])
def test_a_newline_suffixed_field_is_refused(field, change):
    """`$` matches before a final newline: every pattern is anchored with \\A...\\Z."""
    with pytest.raises(InvalidMessage) as error:
        messages.check(messages.INSTANCE_SPEC, change(SPEC))
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("amount", [256.0, 1.0, True, 2**31, 0, -1, "1"])
def test_amounts_are_strict_bounded_integers(amount):
    for message in ({**SPEC, "resources": {"MEMORY_MB": amount}},
                    {**SPEC, "allocations": {RP: {"resources": {"MEMORY_MB": amount}}}},
                    {**RECORD, "resources": {"MEMORY_MB": amount}}):
        schema = messages.INSTANCE_RECORD if "state" in message else messages.INSTANCE_SPEC
        with pytest.raises(InvalidMessage):
            messages.decode(schema, json.dumps(message))


def test_the_largest_amount_placement_takes_is_accepted():
    messages.check(messages.INSTANCE_SPEC, {**SPEC, "resources": {"DISK_GB": 2**31 - 1}})


@pytest.mark.parametrize("name", ["web\x1b[2J", "a\x00b", "line\nbreak", "del\x7f", "c1\x9b",
                                  "surrogate\ud800", "x" * 64, ""])
def test_a_name_is_printable_and_short(name):
    """Control characters in a name made the domain XML invalid."""
    with pytest.raises(InvalidMessage) as error:
        messages.check(messages.INSTANCE_SPEC, {**SPEC, "name": name})
    assert "\n" not in str(error.value) and "\x1b" not in str(error.value)


@pytest.mark.parametrize(("change", "schema"), [
    ({"alternates": [{"host": RP, "allocations": {}}] * 17}, messages.INSTANCE_SPEC),
    ({"allocations": {str(uuidlib.uuid4()): {"resources": {"VCPU": 1}} for _ in range(17)}},
     messages.INSTANCE_SPEC),
    ({"resources": {f"CUSTOM_R{i}": 1 for i in range(65)}}, messages.INSTANCE_SPEC),
    ({"image": {"url": "http://x/" + "a" * 2048}}, messages.INSTANCE_SPEC),
    ({"error": "e" * 4097}, messages.INSTANCE_RECORD),
    ({"name": "n" * 64}, messages.INSTANCE_RECORD),
])
def test_counts_and_lengths_are_bounded(change, schema):
    base = RECORD if schema == messages.INSTANCE_RECORD else SPEC
    with pytest.raises(InvalidMessage):
        messages.check(schema, {**base, **change})


def test_console_text_is_bounded():
    password = {"uuid": RP, "password": "x" * 257, "updated_at": 1.0}
    with pytest.raises(InvalidMessage, match="server_password: password"):
        messages.check(messages.SERVER_PASSWORD, password)
    console = {"uuid": RP, "text": "x" * 65537, "updated_at": 1.0}
    with pytest.raises(InvalidMessage, match="console: text"):
        messages.check(messages.CONSOLE, console)


def test_a_refusal_stands_even_when_the_explainer_finds_no_fault(monkeypatch):
    """Once, a message the compiled validator refused was accepted if jsonschema's
    best_match found no error: one validator's verdict decides."""
    import jsonschema

    monkeypatch.setattr(jsonschema.exceptions, "best_match", lambda _errors: None)
    with pytest.raises(InvalidMessage, match="instance_spec: does not match the schema"):
        messages.check(messages.INSTANCE_SPEC, {**SPEC, "action": "teleport"})


@pytest.mark.parametrize("depth", [17, 1000, 50_000])
def test_deeply_nested_json_is_refused_before_it_is_parsed(depth):
    """~50,000 levels raised RecursionError out of decode and took the host down."""
    for raw in (b"[" * depth + b"]" * depth,
                b'{"uuid":' * depth + b"1" + b"}" * depth):
        with pytest.raises(InvalidMessage, match=f"nested deeper than {messages.MAX_DEPTH}"):
            messages.decode(messages.INSTANCE_SPEC, raw)


def test_brackets_inside_strings_do_not_count_as_nesting():
    assert messages.nesting_depth(b'{"a":"[[[[\\"{{{{","b":[1,{"c":2}]}') == 3
    messages.decode(messages.INSTANCE_SPEC, json.dumps({**SPEC, "user_data": "[" * 10000}))


def test_an_oversized_value_is_refused_before_it_is_parsed():
    raw = b'{"x":"' + b"a" * messages.MAX_MESSAGE_BYTES + b'"}'
    with pytest.raises(InvalidMessage, match="larger than"):
        messages.decode(messages.INSTANCE_RECORD, raw)


def test_the_validators_generated_ahead_of_time_are_those_of_the_schemas_now():
    """Run tools/compile_schemas.py after changing a schema (a stale one is not used, but
    then every command generates that validator again at start)."""
    from etcd_compute.schemas import _files, compiled_source

    compiled = Path(__file__).resolve().parents[2] / "etcd_compute" / "schemas" / "compiled"
    for name in sorted(n.removesuffix(".json") for n in _files() if n != "common.json"):
        path = compiled / f"{name}.py"
        assert path.exists() and path.read_text() == compiled_source(name), \
            f"{name}: run tools/compile_schemas.py"


def test_a_stale_generated_validator_is_not_used(monkeypatch):
    import etcd_compute.schemas as schemas
    from etcd_compute.schemas.compiled import alive

    schemas._compiled.cache_clear()
    monkeypatch.setattr(alive, "SCHEMA_SHA256", "0" * 64)
    try:
        assert schemas._compiled("alive") is not alive.validate
        assert not schemas.is_valid("alive", {"host": "x"})
    finally:
        schemas._compiled.cache_clear()


def test_parse_guards_as_decode_does_without_a_schema():
    assert messages.parse(b'{"action": "build", "anything": [1]}') == {
        "action": "build", "anything": [1]}
    for hostile, fault in ((b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
                           (b'"' + b"a" * (2 << 20) + b'"', "larger than"),
                           (b"{not json", "not valid JSON")):
        with pytest.raises(InvalidMessage, match=f"instance_spec: .*{fault}"):
            messages.parse(hostile, "instance_spec")
