"""os-availability-zone: our zones (aggregates named in api.availability_zones, the
default one for other hosts), available while they have an enabled host."""

from __future__ import annotations

from tests.unit.api.harness import Harness

AGGREGATE = "0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"


def test_zones_and_their_hosts():
    harness = Harness.new(availability_zones={"rack2": AGGREGATE})
    harness.add_host("hv1")
    second = harness.add_host("hv2", alive=False)
    harness.placement.set_aggregates(second, [AGGREGATE])
    listed = harness.call("GET", "/v2.1/os-availability-zone").json["availabilityZoneInfo"]
    assert listed == [{"zoneName": "nova", "zoneState": {"available": True}, "hosts": None},
                      {"zoneName": "rack2", "zoneState": {"available": True}, "hosts": None}]
    detail = harness.admin("GET", "/v2.1/os-availability-zone/detail").json[
        "availabilityZoneInfo"]
    assert detail[1]["hosts"]["hv2"]["nova-compute"]["available"] is False
    assert detail[0]["hosts"]["hv1"]["nova-compute"]["available"] is True
    assert harness.call("GET", "/v2.1/os-availability-zone/detail").status_int == 403
    harness.admin("PUT", f"/v2.1/os-services/{second}", {"status": "disabled"},
                  version="2.53")
    listed = harness.call("GET", "/v2.1/os-availability-zone").json["availabilityZoneInfo"]
    assert listed[1] == {"zoneName": "rack2", "zoneState": {"available": False},
                         "hosts": None}
