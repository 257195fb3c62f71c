"""os-hosts' update body: status or maintenance_mode, enable or disable, nothing else."""

from __future__ import annotations

import jsonschema
import pytest

from etcd_compute.api.schemas import hosts


@pytest.mark.parametrize("body", [{"status": "enable"}, {"maintenance_mode": "disable"},
                                  {"status": "disable", "maintenance_mode": "enable"}])
def test_an_update_names_status_or_maintenance_mode(body):
    jsonschema.validate(body, hosts.update)


@pytest.mark.parametrize("body", [{}, {"status": "enabled"}, {"status": "enable", "x": 1},
                                  {"maintenance_mode": True}])
def test_anything_else_is_refused(body):
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(body, hosts.update)
