"""Tenant usage queries: open until 2.75; paging from 2.40; detailed for the list only."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import simple_tenant_usage as schema
from etcd_compute.api.wsgi import Fault


def test_per_microversion():
    validation.query(schema.query_schema(Version(2, 1), index=True), {"other": ["1"]})
    validation.query(schema.query_schema(Version(2, 40), index=True), {"limit": ["1"]})
    with pytest.raises(Fault):
        validation.query(schema.query_schema(Version(2, 40), index=True), {"limit": ["-1"]})
    with pytest.raises(Fault):
        validation.query(schema.query_schema(Version(2, 75), index=False), {"detailed": ["1"]})
