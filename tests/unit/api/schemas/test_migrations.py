"""os-migrations' queries: open before 2.59, closed from it; 2.66 and 2.80 add filters."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import migrations as schema
from etcd_compute.api.wsgi import Fault


def test_per_microversion():
    validation.query(schema.list_query_schema(Version(2, 1)), {"anything": ["x"]})
    with pytest.raises(Fault):
        validation.query(schema.list_query_schema(Version(2, 59)), {"anything": ["x"]})
    with pytest.raises(Fault):
        validation.query(schema.list_query_schema(Version(2, 59)), {"changes-since": ["x"]})
    with pytest.raises(Fault):
        validation.query(schema.list_query_schema(Version(2, 79)), {"user_id": ["u"]})
    validation.query(schema.list_query_schema(Version(2, 80)),
                     {"user_id": ["u"], "changes-before": ["2026-01-01T00:00:00Z"]})
