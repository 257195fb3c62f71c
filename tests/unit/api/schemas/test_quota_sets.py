"""The quota names per microversion."""

from __future__ import annotations

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import quota_sets


def test_network_quotas_go_at_2_36_and_injection_at_2_57():
    assert "floating_ips" in quota_sets.quotas_at(Version(2, 35))
    assert "floating_ips" not in quota_sets.quotas_at(Version(2, 36))
    assert "injected_files" in quota_sets.quotas_at(Version(2, 56))
    assert set(quota_sets.quotas_at(Version(2, 57))) == set(quota_sets.OURS)
    update = quota_sets.update_schema(Version(2, 57))["properties"]["quota_set"]
    assert "force" in update["properties"] and update["additionalProperties"] is False


def test_networks_is_taken_until_2_36_as_novas_update():
    def names(version: Version) -> set[str]:
        schema = quota_sets.update_schema(version)
        return set(schema["properties"]["quota_set"]["properties"])

    assert quota_sets.NETWORKS in names(Version(2, 35))
    assert quota_sets.NETWORKS not in names(Version(2, 36))
    assert quota_sets.NETWORKS not in quota_sets.quotas_at(Version(2, 1))
