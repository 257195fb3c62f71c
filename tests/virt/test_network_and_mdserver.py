"""The NAT network against libvirt's test driver (the network XML, lease selection and what
the metadata server answers are tested in tests/unit/virt and tests/unit/mdserver)."""

from __future__ import annotations

import libvirt

from etcd_compute.virt import network


def test_network_is_created_and_started_if_missing() -> None:
    connection = libvirt.open("test:///default")
    try:
        net = network.ensure_network(connection, "etcd-compute-unit", "10.9.8.0/24")
        assert net.isActive() and net.autostart()
        assert network.ensure_network(connection, "etcd-compute-unit", "10.9.8.0/24").isActive()
        net.destroy()
        net.undefine()
    finally:
        connection.close()
