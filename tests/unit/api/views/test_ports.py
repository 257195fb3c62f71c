"""Ports as Nova shows them: addresses by network name, an interface attachment."""

from __future__ import annotations

from etcd_compute.api.views import ports as view

PORT = {"id": "port-1", "network_id": "net-1", "mac_address": "fa:16:3e:00:00:01",
        "status": "ACTIVE", "fixed_ips": [{"subnet_id": "sub-4", "ip_address": "10.0.0.5"},
                                          {"subnet_id": "sub-6", "ip_address": "fd00::5"}]}


def test_addresses_by_network_name_with_type_and_mac() -> None:
    shown = view.addresses([PORT, {**PORT, "fixed_ips": []}], {"net-1": "private"}.get)
    mac = {"OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": "fa:16:3e:00:00:01"}
    assert shown == {"private": [{"version": 4, "addr": "10.0.0.5", **mac},
                                 {"version": 6, "addr": "fd00::5", **mac}]}
    assert view.ips(shown) == {"private": [{"version": 4, "addr": "10.0.0.5"},
                                           {"version": 6, "addr": "fd00::5"}]}


def test_an_interface_attachment_is_novas_view() -> None:
    assert view.interface(PORT) == {
        "net_id": "net-1", "port_id": "port-1", "mac_addr": "fa:16:3e:00:00:01",
        "port_state": "ACTIVE", "fixed_ips": PORT["fixed_ips"]}
    assert view.interface(PORT, show_tag=True)["tag"] is None


def test_a_ports_floating_ips_follow_its_fixed_ones() -> None:
    shown = view.addresses([PORT], {"net-1": "private"}.get, {"port-1": ["203.0.113.4"]})
    assert [(a["addr"], a["OS-EXT-IPS:type"]) for a in shown["private"]] == [
        ("10.0.0.5", "fixed"), ("fd00::5", "fixed"), ("203.0.113.4", "floating")]
