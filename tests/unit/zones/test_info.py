"""The rollup: hosts up and down, drivers, traits, and per resource class the capacity, use
and free capacity (summed) and the least and most free on one usable host."""

from __future__ import annotations

from etcd_compute.zones import info


def host(alive=True, disabled=False, traits=(), driver="fake", **resources):
    return {"alive": alive, "disabled": disabled, "driver": driver if alive else None,
            "traits": sorted({*traits, *(["COMPUTE_STATUS_DISABLED"] if disabled else [])}),
            "resources": {rc: {"capacity": c, "used": u} for rc, (c, u) in resources.items()}}


def test_summarize_counts_hosts_and_sums_what_placement_reports():
    summary = info.summarize([
        host(VCPU=(8, 2), traits={"CUSTOM_FAST"}),
        host(VCPU=(4, 0), driver="libvirt"),
        host(alive=False, VCPU=(16, 0)),
        host(disabled=True, VCPU=(4, 4)),
        host(alive=False, driver=None, traits={"MISC_SHARES_VIA_AGGREGATE"}, DISK_GB=(100, 10)),
    ])
    assert (summary["hosts_up"], summary["hosts_down"], summary["hosts_disabled"]) == (3, 1, 1)
    assert summary["hypervisor"] == ["fake", "libvirt"]
    assert "CUSTOM_FAST" in summary["traits"] and "MISC_SHARES_VIA_AGGREGATE" in summary["traits"]
    assert summary["resources"]["VCPU"] == {"capacity": 32, "used": 6, "free": 26,
                                            "min_free": 4, "max_free": 6}
    # A sharing provider's capacity counts; it is no host that one instance could land on.
    assert summary["resources"]["DISK_GB"] == {"capacity": 100, "used": 10, "free": 90,
                                               "min_free": None, "max_free": None}


def test_combine_adds_zones_up_and_keeps_the_extremes():
    one = info.summarize([host(VCPU=(8, 2))])
    two = info.summarize([host(VCPU=(4, 3)), host(alive=False, VCPU=(2, 0))])
    total = info.combine([one, two])
    assert total["resources"]["VCPU"] == {"capacity": 14, "used": 5, "free": 9,
                                          "min_free": 1, "max_free": 6}
    assert (total["hosts_up"], total["hosts_down"]) == (2, 1)
    assert info.combine([]) == {"hosts_up": 0, "hosts_down": 0, "hosts_disabled": 0,
                                "hypervisor": [], "traits": [], "resources": {}}


def test_the_seeds_rows():
    summary = info.summarize([host(VCPU=(8, 2), MEMORY_MB=(2048, 0)), host(VCPU=(4, 0))])
    rows = dict(info.capabilities(summary))
    assert rows["compute_VCPU"] == "4,6" and rows["compute_MEMORY_MB"] == "2048,2048"
    assert rows["free_VCPU"] == "10 of 12" and rows["hypervisor"] == "fake"
    assert rows["hosts"] == "2 up, 0 down, 0 disabled" and rows["traits"] == "-"
    assert info.brief(summary) == ("hypervisor=fake, hosts=2 up;0 down, "
                                   "free=MEMORY_MB:2048;VCPU:10")
