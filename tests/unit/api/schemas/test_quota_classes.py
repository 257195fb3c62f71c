"""os-quota-class-sets' names per microversion, as Nova's."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import quota_classes


def test_the_names_change_at_2_50_and_2_57():
    at_21 = quota_classes.quotas_at(Version(2, 1))
    assert "floating_ips" in at_21 and "server_groups" not in at_21
    at_250 = quota_classes.quotas_at(Version(2, 50))
    assert "floating_ips" not in at_250 and "server_groups" in at_250
    assert "injected_files" in at_250
    assert "injected_files" not in quota_classes.quotas_at(Version(2, 57))
    properties = quota_classes.update_schema(Version(2, 50))["properties"]["quota_class_set"]
    assert properties["additionalProperties"] is False
    assert "floating_ips" not in properties["properties"]


def test_an_update_takes_the_server_groups_and_networks_before_2_50():
    assert {"server_groups", "networks"} <= set(quota_classes.update_names(Version(2, 49)))
    assert "networks" not in quota_classes.update_names(Version(2, 50))
    assert "server_groups" in quota_classes.update_names(Version(2, 57))
