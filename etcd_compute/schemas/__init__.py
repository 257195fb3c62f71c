"""JSON schemas: configuration files and every message we put on etcd.

Each `*.json` file here has an `$id` equal to its file name, so schemas can
refer to each other (`{"$ref": "common.json#/$defs/uuid"}`).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

import jsonschema
from referencing import Registry, Resource


@functools.cache
def _registry() -> Registry:
    registry: Registry = Registry()
    for entry in resources.files(__package__).iterdir():
        if entry.name.endswith(".json"):
            contents = json.loads(entry.read_text())
            registry = registry.with_resource(entry.name, Resource.from_contents(contents))
    return registry


def load_schema(name: str) -> dict[str, Any]:
    """The schema in `<name>.json`."""
    return _registry().contents(f"{name}.json")


@functools.cache
def validator(name: str) -> jsonschema.Draft202012Validator:
    """A reusable validator for the schema `name`, with cross-file refs resolved."""
    return jsonschema.Draft202012Validator(load_schema(name), registry=_registry())
