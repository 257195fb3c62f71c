"""Bodies and query strings against Nova's schemas, with Nova's messages."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.schemas import parameter_types as types
from etcd_compute.api.wsgi import Fault

SCHEMA = {"type": "object",
          "properties": {"server": {"type": "object",
                                    "properties": {"name": types.name,
                                                   "user_data": {"type": "string",
                                                                 "format": "base64"},
                                                   "ip": types.accessIPv4},
                                    "required": ["name"], "additionalProperties": False}},
          "required": ["server"], "additionalProperties": False}


def refusal(body) -> str:
    with pytest.raises(Fault) as caught:
        validation.body(SCHEMA, body)
    assert caught.value.status == 400
    return caught.value.message


def test_a_field_fault_names_the_field_and_its_value():
    assert refusal({"server": {"name": " x"}}) == \
        "Invalid input for field/attribute name. Value:  x. ' x' is not a 'name'"
    assert refusal({"server": {}}).startswith("Invalid input for field/attribute server.")
    assert refusal({}) == "'server' is a required property"
    assert "Additional properties" in refusal({"server": {"name": "x", "y": 1}})


@pytest.mark.parametrize("name,ok", [("web 1", True), ("ünïcode", True), ("a\x00b", False),
                                     ("tab\tin", False), (" lead", False), ("trail ", False),
                                     ("\u2028", False)])
def test_names_are_printable_without_outer_whitespace(name, ok):
    if ok:
        validation.body(SCHEMA, {"server": {"name": name}})
    else:
        refusal({"server": {"name": name}})


@pytest.mark.parametrize("value,ok", [("aGVsbG8=", True), ("aGVs\nbG8=", True),
                                      ("not base64!", False), ("@@@@", False)])
def test_base64_is_strict(value, ok):
    body = {"server": {"name": "x", "user_data": value}}
    if ok:
        validation.body(SCHEMA, body)
    else:
        refusal(body)


def test_echoed_values_are_one_short_printable_line():
    message = refusal({"server": {"name": "x", "ip": "1\n2" + "9" * 1000}})
    assert "\n" not in message and len(message) < 700


def test_query_faults_name_the_parameter_and_times_parse():
    schema = {"type": "object", "properties": {"limit": types.multi_params(
        types.non_negative_integer)}, "additionalProperties": False}
    with pytest.raises(Fault) as caught:
        validation.query(schema, {"limit": ["-1"]})
    assert caught.value.message.startswith("Invalid input for query parameters limit.")
    assert validation.single({"a": ["1", "2"]}, "a") == "2"
    assert validation.parse_time("2026-01-01T00:00:00Z") == 1767225600.0
    assert validation.parse_time("2026-01-01T00:00:00") == 1767225600.0
    assert validation.parse_time("yesterday") is None
