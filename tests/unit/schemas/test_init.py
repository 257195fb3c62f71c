"""schemas/__init__.py: every schema file is found by its name, refs across files are inlined,
and the two validators (jsonschema to explain, the compiled one to check fast) agree: integers
are strict in both, patterns are anchored, and no schema uses a keyword the compiled draft-07
validator would silently ignore."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from etcd_compute import schemas
from etcd_compute.schemas import is_valid, load_schema, validator

NAMES = sorted(entry.name.removesuffix(".json")
               for entry in resources.files(schemas).iterdir() if entry.name.endswith(".json"))
# Schemas of whole messages or files (common.json only holds definitions).
DOCUMENTS = [name for name in NAMES if name != "common"]

DRAFT_07 = {
    "$id", "$schema", "$ref", "$comment", "title", "description", "default", "readOnly",
    "writeOnly", "examples", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
    "exclusiveMinimum", "maxLength", "minLength", "pattern", "additionalItems", "items",
    "maxItems", "minItems", "uniqueItems", "contains", "maxProperties", "minProperties",
    "required", "additionalProperties", "definitions", "properties", "patternProperties",
    "dependencies", "propertyNames", "const", "enum", "type", "format", "if", "then", "else",
    "allOf", "anyOf", "oneOf", "not",
    "$defs",  # 2020-12's, but inlined away before compiling
}
NAMED_SCHEMAS = {"properties", "patternProperties", "$defs", "definitions", "dependencies"}
VALUES = {"enum", "const", "examples", "default", "required"}


def keywords(node: Any) -> set[str]:
    """Every keyword used in a schema (property names and literal values are not keywords)."""
    if isinstance(node, list):
        return set().union(*map(keywords, node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = set(node)
    for key, value in node.items():
        if key in NAMED_SCHEMAS:
            found |= keywords(list(value.values()))
        elif key not in VALUES:
            found |= keywords(value)
    return found


def patterns(node: Any) -> list[str]:
    if isinstance(node, list):
        return [p for item in node for p in patterns(item)]
    if not isinstance(node, dict):
        return []
    found = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
    found += list(node.get("patternProperties", {}))
    return found + [p for key, value in node.items() if key not in VALUES
                    for p in patterns(value)]


def check_both(name: str, instance: Any) -> bool:
    fast, slow = is_valid(name, instance), validator(name).is_valid(instance)
    assert fast == slow, (name, instance)
    return fast


@pytest.mark.parametrize("name", NAMES)
def test_each_schema_file_is_found_by_its_name_which_is_its_id(name):
    schema = load_schema(name)
    assert schema["$id"] == f"{name}.json"
    assert schema == json.loads(resources.files(schemas).joinpath(f"{name}.json").read_text())


@pytest.mark.parametrize("name", DOCUMENTS)
def test_refs_are_inlined_and_each_validator_is_built_once(name):
    inlined = json.dumps(validator(name).schema)
    assert '"$ref"' not in inlined and '"$defs"' not in inlined
    assert validator(name) is validator(name)
    assert check_both(name, ["not", "an", "object"]) is False  # and both validators run


ALIVE = {"host": "0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a10", "name": "host-1", "since": 1.5,
         "pid": 4242}


def test_a_ref_inside_common_resolves_in_common_when_reached_from_another_file():
    # alive.json -> common.json#/$defs/host_name -> #/$defs/printable (in common.json)
    assert check_both("alive", ALIVE)
    for name in ("host\x1b[2J", "host\u0085", "", "h" * 256):
        assert not check_both("alive", {**ALIVE, "name": name}), name


@pytest.mark.parametrize(("pid", "valid"), [(1, True), (4242, True), (4242.0, False),
                                            (1.0, False), (True, False), ("4242", False)])
def test_integers_are_strict_in_both_validators(pid, valid):
    assert check_both("alive", {**ALIVE, "pid": pid}) is valid
    assert check_both("host_stats", {"updated_at": 1.0, "instances": pid}) is valid


@pytest.mark.parametrize("host", [ALIVE["host"] + "\n", "\n" + ALIVE["host"],
                                  ALIVE["host"].upper(), ALIVE["host"] + "0"])
def test_anchored_patterns_refuse_a_trailing_newline_in_both_validators(host):
    assert not check_both("alive", {**ALIVE, "host": host})


@pytest.mark.parametrize("name", NAMES)
def test_every_pattern_is_anchored_with_a_and_z_not_a_dollar(name):
    found = patterns(load_schema(name))
    assert all(p.startswith("\\A") and p.endswith("\\Z") for p in found), found


@pytest.mark.parametrize("name", NAMES)
def test_no_schema_uses_a_keyword_the_compiled_draft_07_validator_would_ignore(name):
    assert keywords(load_schema(name)) <= DRAFT_07, keywords(load_schema(name)) - DRAFT_07


def test_the_keyword_walk_sees_keywords_and_not_names_or_values():
    schema = {"type": "object", "properties": {"prefixItems": {"unevaluatedItems": False}},
              "enum": [{"dependentRequired": 1}], "$defs": {"x": {"minContains": 1}}}
    assert keywords(schema) == {"type", "properties", "enum", "$defs", "unevaluatedItems",
                                "minContains"}
