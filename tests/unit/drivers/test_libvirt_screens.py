"""A guest's screen from libvirt (drivers/libvirt_screens.py), with a stand-in connection:
only a running domain of ours gives one, as the descriptor libvirt hands out. The real
one: tests/virt/test_remote_console_vm.py."""

from __future__ import annotations

import socket

import libvirt
import pytest

from etcd_compute.drivers import libvirt_screens
from etcd_compute.drivers.libvirt_screens import LibvirtScreens

OURS = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


class Domain:
    def __init__(self, running: bool = True, ours: bool = True):
        self.running, self.ours, self.asked = running, ours, []
        self.here, self.there = socket.socketpair()

    def isActive(self) -> int:  # noqa: N802 (libvirt's name)
        return int(self.running)

    def openGraphicsFD(self, index: int, flags: int) -> int:  # noqa: N802
        self.asked.append((index, flags))
        return self.here.detach()


class Connection:
    def __init__(self, domains: dict[str, Domain]):
        self.domains = domains

    def isAlive(self) -> int:  # noqa: N802
        return 1

    def lookupByName(self, name: str) -> Domain:  # noqa: N802
        if name not in self.domains:
            error = libvirt.libvirtError("no domain")
            error.get_error_code = lambda: libvirt.VIR_ERR_NO_DOMAIN
            raise error
        return self.domains[name]

    def close(self) -> None:
        pass


@pytest.fixture
def screens(monkeypatch):
    monkeypatch.setattr(libvirt_screens, "is_ours", lambda domain: domain.ours)
    screens = LibvirtScreens("qemu:///system")

    def world(**domains: Domain) -> LibvirtScreens:
        screens._connection = Connection(domains)
        return screens

    return world


def test_a_running_guest_of_ours_gives_the_descriptor_libvirt_hands_out(screens):
    guest = Domain()
    opened = screens(**{OURS: guest}).open(OURS)
    assert guest.asked == [(0, 0)]
    guest.there.sendall(b"RFB 003.008\n")
    assert opened.recv(12) == b"RFB 003.008\n"
    opened.close()


@pytest.mark.parametrize("guest", [Domain(running=False), Domain(ours=False), None])
def test_a_stopped_foreign_or_missing_domain_has_no_screen(screens, guest):
    world = screens(**({OURS: guest} if guest is not None else {}))
    assert world.open(OURS) is None
    if guest is not None:
        assert guest.asked == []
