"""mdserver/supervisor.py: when the compute starts the metadata server, when it refuses to
(a mdserver.conf that disagrees with compute.yaml, another server on the address), how it
finds a running one (pid file and command line). A real start and stop:
tests/virt/test_network_and_mdserver.py."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.errors import ConfigError, ServiceUnavailable
from etcd_compute.mdserver import supervisor
from etcd_compute.mdserver.supervisor import ensure_mdserver, running_pid
from tools.local_services import free_port, stop_pid


def configs(tmp_path: Path, uri: str = "qemu:///system", port: int | None = None,
            **conf: str) -> dict[str, Any]:
    """compute.yaml for the libvirt driver and the mdserver.conf it names (on 127.0.0.1)."""
    mdserver_conf = tmp_path / "mdserver.conf"
    values = {"bind_address": "127.0.0.1", "port": str(port or free_port()),
              "instances_dir": str(tmp_path / "instances"), "libvirt_uri": uri,
              "network": "etcd-compute", "log_file": str(tmp_path / "mdserver.log"), **conf}
    mdserver_conf.write_text("[mdserver]\n" + "".join(f"{k} = {v}\n" for k, v in values.items()))
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"instances_dir": str(tmp_path / "instances")},
        "driver": {"name": "libvirt", "libvirt": {"uri": uri, "network": "etcd-compute",
                                                  "mdserver_config": str(mdserver_conf)}},
    })


@pytest.fixture(autouse=True)
def no_server_outlives_its_test(tmp_path: Path):
    """A refusal that did not happen would have started a real server: stop it by pid."""
    yield
    stop_pid(running_pid(tmp_path / "instances" / ".mdserver.pid"))


@pytest.fixture
def posing(tmp_path: Path):
    """A process whose command line names the metadata server (it only sleeps)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                                "etcd_compute.mdserver"])
    # Popen returns once exec has begun; the kernel sets the new command line a moment
    # later (/proc/PID/cmdline is empty meanwhile), which a loaded CI run once saw.
    deadline = time.monotonic() + 10
    while "etcd_compute.mdserver" not in psutil.Process(process.pid).cmdline():
        assert time.monotonic() < deadline, "the posing process never showed its command line"
        time.sleep(0.01)
    yield process.pid
    stop_pid(process.pid)


def test_no_server_for_the_fake_driver_or_the_test_driver(tmp_path):
    fake = deep_merge(configs(tmp_path), {"driver": {"name": "fake"}})
    assert ensure_mdserver(fake) is None
    assert ensure_mdserver(configs(tmp_path, uri="test:///default")) is None  # no guests
    assert not (tmp_path / "instances").exists()


@pytest.mark.parametrize(("key", "conf", "shown", "compute", "name"), [
    ("instances_dir", "/elsewhere", "/elsewhere", None, "compute.instances_dir"),
    ("libvirt_uri", "qemu:///session", "qemu:///session", "qemu:///system",
     "driver.libvirt.uri"),
    ("network", "other-net", "other-net", "etcd-compute", "driver.libvirt.network"),
    ("connections_per_guest", "16", 16, 8, "driver.libvirt.metadata_connections_per_guest"),
])
def test_a_mdserver_conf_that_disagrees_with_compute_yaml_is_refused(tmp_path, key, conf,
                                                                     shown, compute, name):
    config = configs(tmp_path, **{key: conf})
    compute = compute or str(tmp_path / "instances")
    with pytest.raises(ConfigError) as caught:
        ensure_mdserver(config)
    assert str(caught.value) == (f"{tmp_path / 'mdserver.conf'}: mdserver.{key} is {shown!r} "
                                 f"but compute.yaml has {compute!r} ({name})")


def test_a_mode_other_than_the_network_backends_is_refused(tmp_path):
    config = configs(tmp_path, mode="signed", shared_secret_file=str(tmp_path / "secret"))
    with pytest.raises(ConfigError) as caught:
        ensure_mdserver(config)
    assert str(caught.value) == (f"{tmp_path / 'mdserver.conf'}: mdserver.mode is 'signed' "
                                 "but compute.yaml has 'lease' (network.backend libvirt)")
    neutron = deep_merge(configs(tmp_path), {"network": {"backend": "neutron"}})
    with pytest.raises(ConfigError) as caught:
        ensure_mdserver(neutron)
    assert str(caught.value) == (f"{tmp_path / 'mdserver.conf'}: mdserver.mode is 'lease' "
                                 "but compute.yaml has 'signed' (network.backend neutron)")


def test_under_neutron_the_nat_networks_settings_are_not_compared(tmp_path, posing):
    # Signed mode serves no guest of the NAT network: its name and the guest filter's cap
    # are not the server's business.
    config = deep_merge(
        configs(tmp_path, mode="signed", shared_secret_file=str(tmp_path / "secret"),
                network="unused", connections_per_guest="16"),
        {"network": {"backend": "neutron"}})
    assert supervisor.mode_for(config) == "signed"
    supervisor.pid_file_for(config).parent.mkdir(parents=True)
    supervisor.pid_file_for(config).write_text(f"{posing}\n")
    assert ensure_mdserver(config) == posing


def test_instance_dirs_are_compared_as_absolute_paths(tmp_path, monkeypatch, posing):
    monkeypatch.chdir(tmp_path)
    config = configs(tmp_path, instances_dir="instances")
    supervisor.pid_file_for(config).parent.mkdir(parents=True)
    supervisor.pid_file_for(config).write_text(f"{posing}\n")
    assert ensure_mdserver(config) == posing


def test_a_running_server_is_found_by_its_pid_file_and_its_command_line(tmp_path, posing):
    pid_file = tmp_path / "pid"
    assert running_pid(pid_file) is None  # no file
    for text in ("", "not a pid", "-1", str(2**22 + 1)):  # garbage, or no such process
        pid_file.write_text(text)
        assert running_pid(pid_file) is None
    pid_file.write_text(f"{psutil.Process().pid}\n")  # alive, but something else
    assert running_pid(pid_file) is None
    pid_file.write_text(f"{posing}\n")
    assert running_pid(pid_file) == posing


def test_a_running_server_is_not_started_twice(tmp_path, posing):
    config = configs(tmp_path)
    pid_file = supervisor.pid_file_for(config)
    pid_file.parent.mkdir(parents=True)
    pid_file.write_text(f"{posing}\n")
    assert ensure_mdserver(config) == posing
    assert pid_file.read_text() == f"{posing}\n"


def test_another_server_on_the_address_is_named_not_fought(tmp_path):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        config = configs(tmp_path, port=holder.getsockname()[1])
        with pytest.raises(ServiceUnavailable) as caught:
            ensure_mdserver(config)
    finally:
        holder.close()
    assert f"is already served by another metadata server (pid {psutil.Process().pid})" in \
        str(caught.value)


def test_a_server_that_does_not_come_up_is_reported_with_its_log(tmp_path, monkeypatch):
    monkeypatch.setattr(supervisor, "START_TIMEOUT_SECONDS", 0.05)  # it cannot: no log dir
    config = configs(tmp_path, log_file=str(tmp_path / "no-such-dir" / "mdserver.log"))
    with pytest.raises(ServiceUnavailable) as caught:
        ensure_mdserver(config)
    assert str(caught.value) == ("metadata server did not start; see "
                                 f"{tmp_path / 'no-such-dir' / 'mdserver.log'}")


def test_a_stopped_server_left_unreaped_by_its_parent_counts_as_stopped(tmp_path):
    """The server is detached: once it exits, reaping it is its adoptive parent's business
    (an init that reaps late held every stop ~2 s). Here its parent is a `sleep`, which
    never reaps: the stop returns once the server is a zombie, without waiting for that."""
    parent = subprocess.Popen(
        ["sh", "-c", f"'{sys.executable}' -c 'import time; time.sleep(60)' "
                     "etcd_compute.mdserver & echo $!; exec sleep 30"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        pid = int(parent.stdout.readline())
        while psutil.Process(parent.pid).cmdline()[0] != "sleep":  # sh reaps until then
            time.sleep(0.01)
        config = configs(tmp_path)
        supervisor.pid_file_for(config).parent.mkdir(parents=True, exist_ok=True)
        supervisor.pid_file_for(config).write_text(f"{pid}\n")
        assert running_pid(supervisor.pid_file_for(config)) == pid
        started = time.monotonic()
        supervisor.stop_mdserver(config, timeout=10)
        assert time.monotonic() - started < 5  # waiting for the reaping: all 10 s
        assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE  # still not reaped
    finally:
        stop_pid(parent.pid)
