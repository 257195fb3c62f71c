"""JSON schemas: configuration files and every message we put on etcd.

Each `*.json` file here has an `$id` equal to its file name, so schemas can
refer to each other (`{"$ref": "common.json#/$defs/uuid"}`).

"integer" is strict in both validators: an int, never a float such as 256.0
(which JSON Schema since draft 6 calls an integer) and never a boolean.
Patterns are anchored `\\A...\\Z` (`$` also matches before a final newline).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from typing import TYPE_CHECKING, Any

import fastjsonschema
from fastjsonschema.draft04 import CodeGeneratorDraft04
from fastjsonschema.draft07 import CodeGeneratorDraft07
from fastjsonschema.ref_resolver import RefResolver

if TYPE_CHECKING:
    import jsonschema.protocols


@functools.cache
def _files() -> dict[str, Any]:
    """Every schema file's contents by file name (refs are resolved by `_inline_refs`)."""
    return {entry.name: json.loads(entry.read_text())
            for entry in resources.files(__package__).iterdir()
            if entry.name.endswith(".json")}


def load_schema(name: str) -> dict[str, Any]:
    """The schema in `<name>.json`."""
    return _files()[f"{name}.json"]


def _inline_refs(node: Any, base: str) -> Any:
    """`node` with every `$ref` replaced by a copy of its target (our refs never recurse).

    Resolving refs through the registry on every validation cost ~0.5 ms per
    message (most of the time on the notification path); a ref-free schema
    validates in a fraction of that.
    """
    if isinstance(node, list):
        return [_inline_refs(item, base) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        target_file, _, pointer = ref.partition("#")
        target_file = target_file or base
        target: Any = _files()[target_file]
        for part in filter(None, pointer.split("/")):
            target = target[part]
        return _inline_refs(target, target_file)
    return {key: _inline_refs(value, base) for key, value in node.items() if key != "$defs"}


def _is_strict_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


@functools.cache
def validator(name: str) -> jsonschema.protocols.Validator:
    """A reusable validator for the schema `name`, with cross-file refs inlined.

    Use it to explain what is wrong (`best_match`); `is_valid` is the fast check.
    (jsonschema is imported here, when something needs explaining: importing it
    costs a short-lived command like schedule.py ~100 ms.)
    """
    import jsonschema

    strict = jsonschema.validators.extend(
        jsonschema.Draft202012Validator,
        type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
            "integer", _is_strict_integer),
    )
    return strict(_inline_refs(load_schema(name), f"{name}.json"))


class _StrictIntegersDraft07(CodeGeneratorDraft07):
    """Draft 7, with draft 4's "integer": an int, not a float without a fraction."""

    def generate_type(self) -> None:
        CodeGeneratorDraft04.generate_type(self)


@functools.cache
def _compiled(name: str) -> Callable[[Any], Any]:
    schema = _inline_refs(load_schema(name), f"{name}.json")
    # Our schemas only use keywords draft-07 has too; fastjsonschema compiles draft-07.
    schema = {**schema, "$schema": "http://json-schema.org/draft-07/schema#"}
    # What fastjsonschema.compile does, with our generator.
    resolver = RefResolver.from_schema(schema, store={})
    generator = _StrictIntegersDraft07(schema, resolver=resolver)
    state = generator.global_state
    exec(generator.func_code, state)  # noqa: S102 (fastjsonschema's own way to compile)
    return state[resolver.get_scope_name()]


def is_valid(name: str, instance: Any) -> bool:
    """Fast check (compiled to Python): ~100x cheaper than walking the schema."""
    try:
        _compiled(name)(instance)
    except fastjsonschema.JsonSchemaValueException:
        return False
    return True
