"""The fake driver's NICs on Neutron ports: what it asks ovs-vsctl (subprocess replaced)."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from etcd_compute.drivers import fake_vifs
from etcd_compute.errors import BuildError
from etcd_compute.virt.vif import Vif

PORT = "0123abcd-0000-4000-8000-00000000000a"
OTHER = "4567cdef-0000-4000-8000-00000000000b"
MAC = "fa:16:3e:00:00:01"
UUID = "11111111-2222-4333-8444-555555555555"


class Vsctl:
    """ovs-vsctl's stand-in: records each argv, answers `find` with `found`."""

    def __init__(self, found: str = "", code: int = 0, stderr: str = ""):
        self.calls: list[list[str]] = []
        self.found, self.code, self.stderr = found, code, stderr

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        out = self.found if "find" in argv else ""
        return subprocess.CompletedProcess(argv, self.code, out, self.stderr)


@pytest.fixture
def vsctl(monkeypatch: pytest.MonkeyPatch) -> Vsctl:
    fake = Vsctl()
    monkeypatch.setattr(fake_vifs.subprocess, "run", fake)
    return fake


def test_a_port_is_an_internal_port_with_the_external_ids_libvirt_sets():
    args = fake_vifs.plug_commands(UUID, [Vif(PORT, MAC, 1442)])
    assert args[:5] == ["--", "--may-exist", "add-port", "br-int", f"tap{PORT[:11]}"]
    assert "type=internal" in args and "mtu_request=1442" in args
    assert f"external_ids:iface-id={PORT}" in args
    assert f'external_ids:attached-mac="{MAC}"' in args
    assert "external_ids:iface-status=active" in args
    assert f"external_ids:vm-uuid={UUID}" in args


def test_every_port_of_a_guest_is_plugged_in_one_transaction_on_the_hosts_database(vsctl):
    fake_vifs.plug("unix:/x/db.sock", UUID, [
        {"port_id": PORT, "mac": MAC, "mtu": None, "bridge": "br-int"},
        {"port_id": OTHER, "mac": "FA:16:3E:00:00:02", "mtu": 1442, "bridge": "br-int"}])
    (argv,) = vsctl.calls
    assert argv[:2] == ["ovs-vsctl", "--db=unix:/x/db.sock"]
    assert argv.count("add-port") == 2 and "mtu_request=1442" in argv
    assert 'external_ids:attached-mac="fa:16:3e:00:00:02"' in argv  # lower case, as Neutron


def test_without_a_database_or_ports_nothing_is_asked(vsctl):
    fake_vifs.plug(None, UUID, [{"port_id": PORT, "mac": MAC}])
    fake_vifs.plug("unix:/x/db.sock", UUID, [])
    fake_vifs.unplug(None, UUID)
    assert vsctl.calls == []


def test_a_port_that_is_not_a_port_is_refused_before_ovs_vsctl(vsctl):
    with pytest.raises(ValueError):
        fake_vifs.plug("unix:/x/db.sock", UUID, [{"port_id": "br-int -- del-br", "mac": MAC}])
    assert vsctl.calls == []


def test_unplug_removes_every_interface_of_the_guest_and_only_those(vsctl):
    vsctl.found = f"tap{PORT[:11]}\n\ntap{OTHER[:11]}\n"
    fake_vifs.unplug("unix:/x/db.sock", UUID)
    find, delete = vsctl.calls
    assert find[-3:] == ["find", "Interface", f"external_ids:vm-uuid={UUID}"]
    assert delete[3:] == ["--", "--if-exists", "del-port", f"tap{PORT[:11]}",
                          "--", "--if-exists", "del-port", f"tap{OTHER[:11]}"]


def test_unplug_of_a_guest_with_nothing_plugged_changes_nothing(vsctl):
    fake_vifs.unplug("unix:/x/db.sock", UUID)
    assert len(vsctl.calls) == 1  # the find only


def test_a_switch_that_refuses_fails_the_build_in_one_line(vsctl):
    vsctl.code, vsctl.stderr = 1, "ovs-vsctl: unix:/x/db.sock: database connection failed\n"
    with pytest.raises(BuildError, match="database connection failed") as caught:
        fake_vifs.plug("unix:/x/db.sock", UUID, [{"port_id": PORT, "mac": MAC}])
    assert "\n" not in str(caught.value)


def test_a_missing_ovs_vsctl_fails_the_build(monkeypatch: pytest.MonkeyPatch):
    def missing(argv: list[str], **_: Any) -> None:
        raise FileNotFoundError(2, "No such file or directory", "ovs-vsctl")

    monkeypatch.setattr(fake_vifs.subprocess, "run", missing)
    with pytest.raises(BuildError, match="ovs-vsctl"):
        fake_vifs.unplug("unix:/x/db.sock", UUID)
