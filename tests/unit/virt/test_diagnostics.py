"""A libvirt guest's diagnostics, read from libvirt's own test driver's domain: Nova's 2.48
shape, None where a stopped guest has no figures, and a message the console schema takes."""

from __future__ import annotations

import libvirt
import pytest

from etcd_compute import messages
from etcd_compute.virt import diagnostics

UUID = "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d"


@pytest.fixture
def domain():
    connection = libvirt.open("test:///default")  # a fresh in-process hypervisor each time
    yield connection.lookupByName("test")
    connection.close()


def test_a_running_guests_figures_are_libvirts(domain):
    found = diagnostics.of_domain(domain)
    state, max_kib, _mem, vcpus, _cpu = domain.info()
    assert (found["state"], found["driver"], found["hypervisor"]) == ("running", "libvirt",
                                                                      "test")
    assert found["num_cpus"] == vcpus == len(found["cpu_details"])
    assert found["memory_details"]["maximum"] == max_kib // 1024
    assert found["num_disks"] == len(found["disk_details"]) == 1
    assert found["disk_details"][0]["read_bytes"] is not None
    assert found["nic_details"][0]["mac_address"] == "aa:bb:cc:dd:ee:ff"
    assert found["nic_details"][0]["rx_octets"] is not None
    messages.check(messages.CONSOLE, {"uuid": UUID, "text": "", "updated_at": 1.0,
                                      "diagnostics": found})


def test_a_stopped_guest_has_its_size_but_no_counters(domain):
    domain.destroy()
    found = diagnostics.of_domain(domain)
    assert found["state"] == "shutdown" and found["memory_details"]["used"] is None
    assert all(cpu["time"] is None for cpu in found["cpu_details"])
    assert found["disk_details"][0]["read_bytes"] is None
    messages.check(messages.CONSOLE, {"uuid": UUID, "text": "", "updated_at": 1.0,
                                      "diagnostics": found})


def test_a_figure_libvirt_does_not_give_is_none():
    assert diagnostics._figures((5, -1, 0), 3) == (5, None, 0)
    assert diagnostics._figures(None, 2) == (None, None)
