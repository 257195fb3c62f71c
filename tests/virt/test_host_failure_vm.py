"""A compute killed with SIGKILL while its real guest runs: rebuilt on the other host, and
the stale copy destroyed when the killed compute comes back.

Two hypervisor hosts on one machine: host A is this machine's libvirtd; host B has a
libvirtd of its own in a network namespace (tools/local_services/private_libvirt.py),
its own NAT network and metadata server there, and reaches etcd and Placement through
forwarders (its endpoints, and the certificates naming them, stay 127.0.0.1). A
SIGKILLed daemon cannot fence: libvirt keeps its guest running (README, "When a host
dies"), so until A's compute returns two copies run; it then destroys its own.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge
from etcd_compute.mdserver.supervisor import stop_mdserver
from tests.compute.helpers import claim_and_send, make_spec, record, wait_state
from tests.compute.test_host_failure import fast_controller, rp_of
from tests.support import REPO, wait_for
from tests.virt.conftest import GUEST_CACHE, TEST_NETWORK, VM_TEST_ROOT
from tools.local_services.netns import TestNetwork, netns_usable
from tools.local_services.private_libvirt import PrivateLibvirtd
from tools.local_services.process import stop_pid
from tools.local_services.proxy import CuttableProxy

pytestmark = pytest.mark.vm

B_NETWORK_CIDR = "192.168.125.0/24"
RESOURCES = {"VCPU": 1, "MEMORY_MB": 128, "DISK_GB": 1}
# A TCG boot on a busy 2-core machine: the default test job timeout (30 s) is too short.
BUILD_SECONDS = 240


def endpoint_port(endpoint: str) -> tuple[str, int]:
    host_port = endpoint.split("://")[-1].rstrip("/")
    host, port = host_port.rsplit(":", 1)
    return host, int(port)


@pytest.fixture
def host_b(host_config, compute_config, vm_config, tmp_path) -> Iterator[dict[str, Any]]:
    """Host B: a network namespace, its own libvirtd, forwarders to etcd and Placement."""
    why = netns_usable()
    if why:
        pytest.fail(f"host B needs network namespaces: {why}")
    net = TestNetwork.create()
    root = VM_TEST_ROOT / f"b-{uuidlib.uuid4().hex[:8]}"
    root.mkdir(parents=True, mode=0o711)
    started: list[subprocess.Popen[bytes]] = []
    proxies: list[CuttableProxy] = []
    libvirtd = None
    try:
        space = net.add_host("hvb")
        libvirtd = PrivateLibvirtd(root / "libvirt", space.netns).start()
        config = host_config("host-b")
        for service in ("etcd", "placement"):
            if service == "etcd":
                host, port = endpoint_port(config["etcd"]["endpoints"][0])
            else:
                host, port = endpoint_port(config["placement"]["endpoint"])
            proxies.append(CuttableProxy(host, port, port, net.gateway).start())
            started.append(subprocess.Popen(
                net.run_in(space, [sys.executable, "-m", "tools.local_services.proxy",
                                   f"127.0.0.1:{port}", f"{net.gateway}:{port}"]),
                cwd=REPO, stdin=subprocess.DEVNULL))
            wait_for(lambda p=port: listening(net.run_in(space, []), p), 30,
                     what=f"the {service} forwarder in host B's namespace")
        mdserver_conf = root / "mdserver.conf"
        mdserver_conf.write_text(
            "[mdserver]\n"
            f"instances_dir = {root / 'instances'}\n"
            f"network = {TEST_NETWORK}\n"
            f"libvirt_uri = {libvirtd.uri}\n"
            f"log_file = {root / 'mdserver.log'}\n")
        config = deep_merge(config, {
            "compute": {"state_dir": str(root / "state"), "instances_dir": str(root / "instances"),
                        "job_timeout_seconds": BUILD_SECONDS},
            "driver": {"name": "libvirt", "libvirt": {
                **vm_config["driver"]["libvirt"], "uri": libvirtd.uri,
                "network_cidr": B_NETWORK_CIDR, "image_cache_dir": str(root / "images"),
                "image_file_dirs": [str(GUEST_CACHE)], "mdserver_config": str(mdserver_conf)}},
        })
        config["netns"] = space.netns  # for the test's own use (compute.py never sees it)
        config["libvirtd"] = libvirtd
        yield config
    finally:
        for process in started:
            stop_pid(process.pid)
        with contextlib.suppress(Exception):
            stop_mdserver({"compute": {"instances_dir": str(root / "instances")}})
        if libvirtd is not None:
            libvirtd.stop()
        for proxy in proxies:
            proxy.stop()
        net.delete()
        shutil.rmtree(root, ignore_errors=True)


def listening(prefix: list[str], port: int) -> bool:
    done = subprocess.run([*prefix, "ss", "-Hltn", f"sport = :{port}"], capture_output=True,
                          text=True, check=False)
    return bool(done.stdout.strip())


def start_compute_in(netns: str, config: dict[str, Any], write_yaml, tmp_path: Path
                     ) -> subprocess.Popen[bytes]:
    own = {k: v for k, v in config.items() if k not in ("netns", "libvirtd")}
    path = write_yaml("host-b.yaml", own)
    log = open(tmp_path / "host-b.log", "ab")
    process = subprocess.Popen(
        ["ip", "netns", "exec", netns, sys.executable, str(REPO / "compute.py"),
         "--config", str(path)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    log.close()
    return process


def destroy_domains(uri: str, instances_dir: str) -> None:
    """What a failed run left on host A (the fixture removes host B whole)."""
    connection = libvirt.open(uri)
    try:
        for domain in connection.listAllDomains():
            if (Path(instances_dir) / domain.name()).exists():
                with contextlib.suppress(libvirt.libvirtError):
                    if domain.isActive():
                        domain.destroy()
                    domain.undefine()
    finally:
        connection.close()


def domain_active(uri: str, uuid: str) -> bool:
    connection = libvirt.open(uri)
    try:
        return bool(connection.lookupByName(uuid).isActive())
    except libvirt.libvirtError:
        return False
    finally:
        connection.close()


def domain_defined(uri: str, uuid: str) -> bool:
    connection = libvirt.open(uri)
    try:
        connection.lookupByName(uuid)
        return True
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
            raise
        return False
    finally:
        connection.close()


def test_a_sigkilled_compute_s_guest_is_rebuilt_elsewhere_and_its_stale_copy_destroyed(
        vm_config, host_b, test_guest_image, compute_config, start_compute, start_controller,
        schedule_config, store, placement, write_yaml, tmp_path, run_schedule):
    a = deep_merge(compute_config, {
        "compute": {**{key: vm_config["compute"][key] for key in ("state_dir", "instances_dir")},
                    "job_timeout_seconds": BUILD_SECONDS},
        "driver": {"name": "libvirt", "libvirt": vm_config["driver"]["libvirt"]}})
    a_uri, b_uri = a["driver"]["libvirt"]["uri"], host_b["libvirtd"].uri
    controller = start_controller(fast_controller(schedule_config))
    compute_a = start_compute(a, name="host-a")
    compute_b = start_compute_in(host_b["netns"], host_b, write_yaml, tmp_path)
    try:
        for config in (a, host_b):
            wait_for(lambda c=config: store.get(store.keys.alive(rp_of(c))), 60,
                     what="heartbeats")
        spec = make_spec(rp_of(a), image=f"file://{test_guest_image}",
                         resources=dict(RESOURCES),
                         allocations={rp_of(a): {"resources": dict(RESOURCES)}},
                         on_host_failure="rebuild")
        claim_and_send(store, placement, spec)
        uuid = spec["uuid"]
        wait_state(store, uuid, "ACTIVE", timeout=240)
        assert domain_active(a_uri, uuid)

        compute_a.kill9()  # the daemon only: libvirt keeps the guest running
        assert domain_active(a_uri, uuid)
        wait_for(lambda: (record(store, uuid) or {}).get("host") == rp_of(host_b), 60,
                 what="the controller to rebuild it on host B")
        rebuilt = wait_state(store, uuid, "ACTIVE", timeout=300)
        assert rebuilt["host"] == rp_of(host_b) and rebuilt["ip"].startswith("192.168.125.")
        assert domain_active(b_uri, uuid)
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_of(host_b)}
        assert placement.get_usages(rp_of(a))["VCPU"] == 0

        # Two copies run now (the SIGKILL case); A's compute comes back and ends its own.
        assert domain_active(a_uri, uuid)
        start_compute(a, name="host-a-again")
        wait_for(lambda: not domain_active(a_uri, uuid), 60, what="the stale guest destroyed")
        # Destroyed, then undefined: a second step (a run once looked in between).
        wait_for(lambda: not domain_defined(a_uri, uuid), 30, what="the stale guest undefined")
        wait_for(lambda: not (Path(a["compute"]["instances_dir"]) / uuid).exists(), 30,
                 what="its disk and files removed")

        # The one copy left is B's: it booted there and read its own identity from B's
        # metadata server; A's claim was never touched.
        def console() -> str:
            published, _ = store.read(messages.CONSOLE, store.keys.console(rp_of(host_b), uuid))
            return published["text"] if published else ""

        wait_for(lambda: f"metadata instance-id={uuid}" in console(), 180, interval=0.5,
                 what="the rebuilt guest to read its metadata on host B")
        assert domain_active(b_uri, uuid) and not domain_active(a_uri, uuid)
        assert set(placement.get_allocations(uuid)["allocations"]) == {rp_of(host_b)}
        assert store.get(store.keys.spec(rp_of(a), uuid)) is None

        assert run_schedule("destroy", uuid).code == 0
        wait_state(store, uuid, "DELETED", timeout=60)
        assert not domain_active(b_uri, uuid)
        assert placement.get_allocations(uuid)["allocations"] == {}
    finally:
        # The controller first: with it gone, stopping host B recovers nothing onto A.
        controller.stop()
        stop_pid(compute_b.pid)
        destroy_domains(a_uri, a["compute"]["instances_dir"])
