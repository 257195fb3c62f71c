"""Services, hypervisors and zones as Nova shows them."""

from __future__ import annotations

import webob

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.computes import Compute
from etcd_compute.api.views import computes as view
from etcd_compute.api.wsgi import ApiRequest

UP = Compute("0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11", "hv1", "nova", True, 1.0, "fake",
             False, None, {"VCPU": {"total": 8, "reserved": 1}}, {"VCPU": 2}, 2)
OFF = Compute("1b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11", "hv2", "rack", False, None, None,
              True, "swap")


def at(version: str) -> ApiRequest:
    req = ApiRequest(webob.Request.blank("/").environ)
    req.environ["etcd_compute.version"] = Version.parse(version)
    return req


def test_a_service_per_microversion():
    assert view.service(at("2.53"), UP)["id"] == UP.uuid
    old = view.service(at("2.1"), OFF)
    assert isinstance(old["id"], int) and "forced_down" not in old
    assert (old["status"], old["state"], old["disabled_reason"]) == ("disabled", "down", "swap")


def test_a_hypervisors_detail_and_statistics():
    shown = view.hypervisor(at("2.27"), UP, detail=True)
    assert (shown["vcpus"], shown["vcpus_used"], shown["running_vms"]) == (8, 2, 2)
    assert shown["cpu_info"] == "{}" and shown["hypervisor_type"] == "fake"
    assert "vcpus" not in view.hypervisor(at("2.27"), UP, detail=False)
    stats = view.statistics([UP, OFF])
    assert (stats["count"], stats["vcpus"], stats["running_vms"]) == (2, 8, 2)


def test_zones_available_while_they_have_an_enabled_host():
    assert view.zones([UP, OFF], detail=False) == [
        {"zoneName": "nova", "zoneState": {"available": True}, "hosts": None},
        {"zoneName": "rack", "zoneState": {"available": False}, "hosts": None}]


def test_uptime_reads_as_the_uptime_command():
    from etcd_compute.api.objects.computes import Compute
    from etcd_compute.api.views.computes import uptime

    compute = Compute("u", "hv1", "nova", True, 0.0, "fake", False, None, booted_at=0.0)
    assert uptime(compute, 3 * 86400 + 2 * 3600 + 5 * 60 + 7) == " 02:05:07 up 3 days,  2:05"
    assert uptime(compute, 86400 + 60) == " 00:01:00 up 1 day,  0:01"
    assert uptime(compute, 600) == " 00:10:00 up  0:10"
