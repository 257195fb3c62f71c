"""The NAT network against libvirt's test driver, and the metadata server as the compute
starts it (the network XML, lease selection, what the metadata server answers and when it
is started are tested in tests/unit/virt and tests/unit/mdserver)."""

from __future__ import annotations

import socket
from pathlib import Path

import libvirt
import psutil

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.mdserver.supervisor import (
    ensure_mdserver,
    pid_file_for,
    running_pid,
    stop_mdserver,
)
from etcd_compute.virt import network
from tools.local_services import free_port


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


def test_the_compute_starts_the_metadata_server_detached_and_stops_it_by_pid(tmp_path: Path):
    """On 127.0.0.1 the server touches no libvirt and no bridge."""
    port = free_port()
    conf = tmp_path / "mdserver.conf"
    conf.write_text(f"[mdserver]\nbind_address = 127.0.0.1\nport = {port}\n"
                    f"instances_dir = {tmp_path / 'instances'}\nnetwork = etcd-compute\n"
                    f"log_file = {tmp_path / 'mdserver.log'}\n")
    config = deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"instances_dir": str(tmp_path / "instances")},
        "driver": {"name": "libvirt", "libvirt": {"uri": "qemu:///system",
                                                  "network": "etcd-compute",
                                                  "mdserver_config": str(conf)}}})
    pid = ensure_mdserver(config)
    try:
        assert pid and psutil.Process(pid).ppid() != psutil.Process().pid  # setsid --fork
        assert ensure_mdserver(config) == pid  # found, not started again
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        stop_mdserver(config)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert running_pid(pid_file_for(config)) is None
    stop_mdserver(config)  # nothing to stop: fine
