"""Server metadata schemas: one item per PUT of a key."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.schemas import server_metadata
from etcd_compute.api.wsgi import Fault


def test_one_item_per_key_update():
    validation.body(server_metadata.update, {"meta": {"a": "b"}})
    for body in ({"meta": {}}, {"meta": {"a": "b", "c": "d"}}, {"meta": {"a": 1}}):
        with pytest.raises(Fault):
            validation.body(server_metadata.update, body)
