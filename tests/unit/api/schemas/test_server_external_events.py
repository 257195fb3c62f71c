"""External events' names per microversion, statuses, at least one event."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import server_external_events as schema
from etcd_compute.api.wsgi import Fault

UUID = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def test_names_and_statuses():
    event = {"name": "volume-extended", "server_uuid": UUID, "status": "failed", "tag": "t"}
    validation.body(schema.create_schema(Version(2, 51)), {"events": [event]})
    with pytest.raises(Fault):
        validation.body(schema.create_schema(Version(2, 50)), {"events": [event]})
    with pytest.raises(Fault):
        validation.body(schema.create_schema(Version(2, 1)), {"events": []})
    with pytest.raises(Fault):
        validation.body(schema.create_schema(Version(2, 1)), {"events": [
            {"name": "network-changed", "server_uuid": UUID, "status": "done"}]})
