"""Who is asking the metadata server: source address -> current lease -> MAC -> our domain
-> its meta.json. Over a duck-typed libvirt connection (no libvirtd)."""

from __future__ import annotations

import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.mdserver.resolver import InstanceResolver
from etcd_compute.mdserver.settings import MdserverConfig
from etcd_compute.virt.domain import NAMESPACE, DomainSpec, domain_xml
from etcd_compute.virt.instance_files import InstanceFiles

NETWORK = "etcd-compute-unit"
IP = "192.168.123.50"


def lease(mac: str, ip: str = IP, expires_in: float = 3600,
          kind: int = libvirt.VIR_IP_ADDR_TYPE_IPV4) -> dict[str, Any]:
    return {"mac": mac, "ipaddr": ip, "expirytime": int(time.time() + expires_in),
            "type": kind, "prefix": 24, "iface": "virbr9"}


class FakeNetwork:
    def __init__(self, leases: list[dict[str, Any]]):
        self.leases = leases
        self.reserved: dict[str, str] = {}

    def DHCPLeases(self, mac: str | None = None) -> list[dict[str, Any]]:  # noqa: N802
        return [entry for entry in self.leases if mac is None or entry["mac"] == mac]

    def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802
        hosts = "".join(f"<host mac='{mac}' ip='{ip}'/>" for mac, ip in self.reserved.items())
        return f"<network><ip address='192.168.123.1'><dhcp>{hosts}</dhcp></ip></network>"


class FakeDomain:
    """A domain as libvirt returns it: our XML with the MACs libvirt would have added."""

    def __init__(self, name: str, macs: dict[str, str], ours: bool = True):
        self._name, self.ours = name, ours
        spec = DomainSpec(uuid=name, name=f"guest-{name[:8]}", memory_mb=128, vcpus=1,
                          domain_type="qemu", disk=Path("/i/disk.qcow2"),
                          config_drive=Path("/i/config.iso"), console_log=Path("/i/console.log"),
                          network=NETWORK if "network" in macs else None,
                          bridge="br-ext" if "bridge" in macs else None)
        root = ET.fromstring(domain_xml(spec))
        for nic in root.iterfind("devices/interface"):
            ET.SubElement(nic, "mac", address=macs[nic.get("type")])
        if not ours:
            root.remove(root.find("metadata"))
        self.xml = ET.tostring(root, encoding="unicode")

    def name(self) -> str:
        return self._name

    def XMLDesc(self, flags: int = 0) -> str:  # noqa: N802 (libvirt's names)
        return self.xml

    def metadata(self, kind: int, uri: str, flags: int = 0) -> str:
        if kind == libvirt.VIR_DOMAIN_METADATA_ELEMENT and uri == NAMESPACE and self.ours:
            return "<instance/>"
        raise libvirt.libvirtError("metadata not found: Requested metadata element is not present")


class FakeConnection:
    def __init__(self, leases: list[dict[str, Any]], domains: list[FakeDomain]):
        self.network = FakeNetwork(leases)
        self.domains = domains
        self.list_flags: list[int] = []

    def isAlive(self) -> bool:  # noqa: N802
        return True

    def networkLookupByName(self, name: str) -> FakeNetwork:  # noqa: N802
        if name != NETWORK:
            raise libvirt.libvirtError(f"Network not found: no network with matching name '{name}'")
        return self.network

    def listAllDomains(self, flags: int = 0) -> list[FakeDomain]:  # noqa: N802
        self.list_flags.append(flags)
        return self.domains


@pytest.fixture
def instances_dir(tmp_path: Path) -> Path:
    return tmp_path / "instances"


def guest(instances_dir: Path, macs: dict[str, str], ours: bool = True) -> FakeDomain:
    """A domain with its meta.json written where the resolver looks."""
    uuid = str(uuidlib.uuid4())
    files = InstanceFiles.of(instances_dir, uuid)
    files.create()
    files.write_meta({"uuid": uuid, "name": f"guest-{uuid[:8]}", "hostname": "g",
                      "user_data": None, "ssh_key": None})
    return FakeDomain(uuid, macs, ours)


def resolver(instances_dir: Path, connection: FakeConnection) -> InstanceResolver:
    found = InstanceResolver(MdserverConfig(instances_dir=str(instances_dir), network=NETWORK,
                                            libvirt_uri="test:///unused"))
    found._connection = connection  # what `connection` would have opened
    return found


def test_the_guest_holding_the_lease_gets_its_own_meta(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    other = guest(instances_dir, {"network": "52:54:00:00:00:02"})
    connection = FakeConnection([lease("52:54:00:00:00:01"),
                                 lease("52:54:00:00:00:02", "192.168.123.51")],
                                [other, mine])
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == mine.name()
    assert resolver(instances_dir, connection).meta_for("192.168.123.51")["uuid"] == other.name()
    assert connection.list_flags == [libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE] * 2


def test_a_lease_mac_in_upper_case_still_matches(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:ab:cd:ef"})
    connection = FakeConnection([lease("52:54:00:AB:CD:EF")], [mine])
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == mine.name()


def test_an_address_without_a_current_lease_gets_nothing(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    connection = FakeConnection([lease("52:54:00:00:00:01")], [mine])
    assert resolver(instances_dir, connection).meta_for("192.168.123.99") is None
    assert resolver(instances_dir, connection).meta_for("10.0.0.1") is None


def test_a_lease_whose_mac_is_on_no_domain_of_ours_gets_nothing(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    connection = FakeConnection([lease("52:54:00:00:00:77")], [mine])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_a_domain_that_is_not_ours_is_ignored(instances_dir):
    foreign = guest(instances_dir, {"network": "52:54:00:00:00:01"}, ours=False)
    connection = FakeConnection([lease("52:54:00:00:00:01")], [foreign])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_a_mac_on_another_nic_of_ours_does_not_count(instances_dir):
    # The lease's MAC is the guest's bridge NIC, not its NIC on our network.
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01", "bridge": "52:54:00:00:00:02"})
    connection = FakeConnection([lease("52:54:00:00:00:02")], [mine])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_two_leases_on_one_address_resolve_to_the_newest(instances_dir):
    before = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    now = guest(instances_dir, {"network": "52:54:00:00:00:02"})
    # libvirt lists the older lease first; the address was handed on since.
    connection = FakeConnection([lease("52:54:00:00:00:01", expires_in=100),
                                 lease("52:54:00:00:00:02", expires_in=3500)], [before, now])
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == now.name()


def test_expired_leases_are_ignored(instances_dir):
    gone = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    connection = FakeConnection([lease("52:54:00:00:00:01", expires_in=-5)], [gone])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_an_expired_newer_lease_does_not_hide_the_current_one(instances_dir):
    stale = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    current = guest(instances_dir, {"network": "52:54:00:00:00:02"})
    connection = FakeConnection([lease("52:54:00:00:00:01", expires_in=-5),
                                 lease("52:54:00:00:00:02", expires_in=60)], [stale, current])
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == current.name()


def test_ipv6_leases_are_ignored(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    connection = FakeConnection(
        [lease("52:54:00:00:00:01", kind=libvirt.VIR_IP_ADDR_TYPE_IPV6)], [mine])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_a_guest_without_meta_json_gets_nothing(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    InstanceFiles.of(instances_dir, mine.name()).meta.unlink()
    connection = FakeConnection([lease("52:54:00:00:00:01")], [mine])
    assert resolver(instances_dir, connection).meta_for(IP) is None


def test_a_network_libvirt_does_not_know_resolves_to_nothing(instances_dir):
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    connection = FakeConnection([lease("52:54:00:00:00:01")], [mine])
    found = InstanceResolver(MdserverConfig(instances_dir=str(instances_dir), network="other"))
    found._connection = connection
    assert found.meta_for(IP) is None


def test_a_guest_moved_here_is_known_by_its_reserved_address_before_it_renews(instances_dir):
    moved = guest(instances_dir, {"network": "52:54:00:00:00:07"})
    connection = FakeConnection([], [moved])
    connection.network.reserved = {"52:54:00:00:00:07": IP}
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == moved.name()
    # A lease on the address (another guest's, newer) comes first.
    other = guest(instances_dir, {"network": "52:54:00:00:00:08"})
    connection.domains.append(other)
    connection.network.leases.append(lease("52:54:00:00:00:08"))
    assert resolver(instances_dir, connection).meta_for(IP)["uuid"] == other.name()


def test_a_request_is_resolved_by_its_source_address_alone(instances_dir):
    # In lease mode the headers Neutron's agent would send mean nothing: a guest naming
    # another instance in X-Instance-ID still gets only its own.
    mine = guest(instances_dir, {"network": "52:54:00:00:00:01"})
    other = guest(instances_dir, {"network": "52:54:00:00:00:02"})
    connection = FakeConnection([lease("52:54:00:00:00:01"),
                                 lease("52:54:00:00:00:02", "192.168.123.51")], [mine, other])
    environ = {"REMOTE_ADDR": IP, "HTTP_X_INSTANCE_ID": other.name(),
               "HTTP_X_INSTANCE_ID_SIGNATURE": "0" * 64, "HTTP_X_FORWARDED_FOR": "192.168.123.51"}
    assert resolver(instances_dir, connection).meta_for_request(environ)["uuid"] == mine.name()
    assert resolver(instances_dir, connection).meta_for_request(
        {"HTTP_X_INSTANCE_ID": other.name()}) is None
