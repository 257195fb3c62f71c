"""Network XML, lease selection and what the metadata server answers."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver.content import render
from etcd_compute.mdserver.settings import load_config
from etcd_compute.virt import network


def test_network_xml_is_tuned_for_fast_dhcp() -> None:
    root = ET.fromstring(network.network_xml("net", "10.9.8.0/24"))
    assert root.find("forward").get("mode") == "nat"
    assert root.find("bridge").get("stp") == "off"
    assert root.find("ip").get("address") == "10.9.8.1"
    assert root.find("ip/dhcp/range").attrib == {"start": "10.9.8.2", "end": "10.9.8.254"}
    option = root.find(f"{{{network.DNSMASQ_NAMESPACE}}}options/")
    assert option.get("value") == "no-ping"


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


class FakeNetwork:
    """Stands in for virNetwork.DHCPLeases, which the test driver does not implement."""

    def __init__(self, leases: list[dict[str, Any]]):
        self.leases = leases

    def DHCPLeases(self, mac: str | None = None) -> list[dict[str, Any]]:  # noqa: N802
        return [lease for lease in self.leases if mac is None or lease["mac"] == mac]


def lease(mac: str, ip: str, expires_in: float) -> dict[str, Any]:
    return {
        "mac": mac, "ipaddr": ip, "expirytime": int(time.time() + expires_in),
        "type": libvirt.VIR_IP_ADDR_TYPE_IPV4, "prefix": 24, "iface": "virbr9",
    }


def test_leases_ignore_expired_entries_and_prefer_the_newest() -> None:
    net = FakeNetwork([
        lease("52:54:00:00:00:01", "10.0.0.5", -10),  # stale: the guest was destroyed
        lease("52:54:00:00:00:02", "10.0.0.5", 3500),
        lease("52:54:00:00:00:03", "10.0.0.6", 100),
        lease("52:54:00:00:00:03", "10.0.0.7", 3600),
    ])
    assert network.macs_for_ip(net, "10.0.0.5") == ["52:54:00:00:00:02"]
    assert network.lease_ip(net, "52:54:00:00:00:03") == "10.0.0.7"
    assert network.lease_ip(net, "52:54:00:00:00:01") is None
    assert network.macs_for_ip(net, "10.0.0.9") == []


META = {
    "uuid": "11111111-2222-3333-4444-555555555555",
    "name": "Web 1",
    "hostname": "web-1",
    "user_data": "#!/bin/sh\necho hi\n",
    "ssh_key": "ssh-ed25519 AAAA me",
}


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/latest/meta-data/", "instance-id\nhostname\nlocal-hostname\npublic-keys/\n"),
        ("/latest/meta-data/instance-id", META["uuid"]),
        ("/2009-04-04/meta-data/instance-id", META["uuid"]),
        ("/latest/meta-data/hostname", "web-1"),
        ("/latest/meta-data/local-hostname", "web-1"),
        ("/latest/meta-data/public-keys/", "0=key\n"),
        ("/latest/meta-data/public-keys/0/openssh-key", "ssh-ed25519 AAAA me\n"),
        ("/latest/user-data", "#!/bin/sh\necho hi\n"),
    ],
)
def test_ec2_paths(path: str, body: str) -> None:
    assert render(path, META) == ("text/plain; charset=utf-8", body.encode())


def test_openstack_meta_data_json() -> None:
    content_type, body = render("/openstack/latest/meta_data.json", META)
    assert content_type == "application/json"
    document = json.loads(body)
    assert document["uuid"] == META["uuid"]
    assert document["hostname"] == "web-1"
    assert document["public_keys"] == {"key": "ssh-ed25519 AAAA me"}


def test_unknown_paths_and_missing_data_are_404() -> None:
    bare = {**META, "user_data": None, "ssh_key": None}
    assert render("/latest/user-data", bare) is None
    assert render("/latest/meta-data/public-keys/0/openssh-key", bare) is None
    assert render("/latest/meta-data/../../etc/passwd", META) is None
    assert render("/nothing", META) is None


def test_mdserver_config(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nport = 8775\nnetwork = other\n")
    config = load_config(conf)
    assert (config.port, config.network, config.bind_address) == (8775, "other", "169.254.169.254")
    conf.write_text("[mdserver]\nprot = 80\n")
    with pytest.raises(ConfigError, match="unknown key 'mdserver.prot'"):
        load_config(conf)


def test_sample_mdserver_conf_loads() -> None:
    config = load_config(Path(__file__).resolve().parents[2] / "mdserver.conf")
    assert config.port == 80 and config.instances_dir == "/var/lib/etcd-compute/instances"
