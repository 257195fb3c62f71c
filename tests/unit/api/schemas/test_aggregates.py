"""os-aggregates' bodies: Nova's names and zone names, metadata with null values."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.schemas import aggregates as schema
from etcd_compute.api.wsgi import Fault


def test_names_and_zones():
    validation.body(schema.create, {"aggregate": {"name": "a", "availability_zone": None}})
    for name in ("", " a", "a" * 256):
        with pytest.raises(Fault):
            validation.body(schema.create, {"aggregate": {"name": name}})
    with pytest.raises(Fault):
        validation.body(schema.create, {"aggregate": {"name": "a", "availability_zone": "x:y"}})
    with pytest.raises(Fault):
        validation.body(schema.update, {"aggregate": {}})
    validation.body(schema.update, {"aggregate": {"name": " spaced "}})


def test_actions():
    validation.body(schema.add_host, {"add_host": {"host": "hv-1.example"}})
    with pytest.raises(Fault):
        validation.body(schema.remove_host, {"remove_host": {"host": "a b"}})
    validation.body(schema.set_metadata, {"set_metadata": {"metadata": {"k": None}}})
    with pytest.raises(Fault):
        validation.body(schema.set_metadata, {"set_metadata": {"metadata": {"k": 1}}})
