"""What admins see of the hosts through the real API: hypervisors from Placement, the
compute service (disable with a reason is the host's disable: the scheduler skips it),
availability zones."""

from __future__ import annotations

import openstack.exceptions
import pytest

from etcd_compute import hosts
from tests.api.conftest import IMAGE, Cloud


def test_hypervisors_services_and_zones(cloud: Cloud) -> None:
    admin = cloud.connect("admin")
    (hypervisor,) = [h for h in admin.compute.hypervisors(details=True)
                     if h.id == cloud.host]
    assert hypervisor.state == "up" and hypervisor.status == "enabled"
    assert hypervisor.vcpus == 64 and hypervisor.memory_size == 32768
    (service,) = [s for s in admin.compute.services() if s.id == cloud.host]
    assert (service.binary, service.state, service.status) == ("nova-compute", "up",
                                                               "enabled")
    zones = [z.name for z in admin.compute.availability_zones()]
    assert "nova" in zones
    with pytest.raises(openstack.exceptions.ForbiddenException):
        list(cloud.connect("demo").compute.hypervisors())


def test_a_disabled_service_takes_no_new_server(cloud: Cloud) -> None:
    admin, demo = cloud.connect("admin"), cloud.connect("demo")
    (service,) = [s for s in admin.compute.services() if s.id == cloud.host]
    admin.compute.disable_service(service, service.host, service.binary,
                                  disabled_reason="maintenance window")
    try:
        assert hosts.maintenance(cloud.store, cloud.host)["reason"] == "maintenance window"
        (service,) = [s for s in admin.compute.services() if s.id == cloud.host]
        assert service.status == "disabled"
        server = demo.compute.create_server(name="nowhere", flavor_id="1", image_id=IMAGE,
                                            networks="auto")
        failed = demo.compute.wait_for_server(server, status="ERROR", failures=[], wait=60,
                                              interval=0.3)
        assert "No valid host" in failed.fault["message"]
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    finally:
        admin.compute.enable_service(service, service.host, service.binary)
    assert hosts.maintenance(cloud.store, cloud.host) is None
