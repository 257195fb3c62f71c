"""The cloud Tempest judges: what `make up` starts, on free ports, plus what it leaves to you.

`make up`'s services (`LocalStack`: etcd with TLS and RBAC, Placement, Keystone, Glance,
the compute API in the catalog with Nova's usual flavors) in their own run directory, so a
`make up` beside it is untouched; then a controller (`schedule.py serve`: the scheduler
service, recovery), compute hosts on the fake driver (the API's behaviour is the subject,
not guests: a fake build takes no time and holds no disk; each host has its own
certificate and etcd role, as `cluster.py host add` makes them) and two small public raw
images in Glance. Every process is recorded in the stack's state file, so `stop` (or
`python -m tools.local_services down --run-dir DIR` after a crash) removes all of it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
import yaml

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from tools.local_services import cloud as local_cloud
from tools.local_services.process import REPO, free_port, pid_alive, stop_pid
from tools.local_services.stack import LocalStack
from tools.tempest_run.conf import Cloud
from tools.tempest_run.network import TempestStack, neutron_extensions

Say = Callable[[str], None]

# Nova's usual flavors, as `make up` seeds them (tools/local_services/compute_api.py):
# Tempest builds with m1.nano and resizes to the larger m1.micro, as devstack sets it.
FLAVOR_REF, FLAVOR_REF_ALT = "42", "84"
IMAGES = ("tempest-image", "tempest-image-alt")
# Room for every server Tempest's workers make at once (dozens), never the limit tested.
INVENTORY = {"VCPU": {"total": 256, "reserved": 0, "allocation_ratio": 1.0},
             "MEMORY_MB": {"total": 131072, "reserved": 0, "allocation_ratio": 1.0},
             "DISK_GB": {"total": 2000, "reserved": 0, "allocation_ratio": 1.0}}


def fresh_stack(run_dir: Path, say: Say) -> TempestStack:
    """The stack of `run_dir`, whatever an interrupted run left there removed first."""
    stack = TempestStack.load(run_dir)
    if stack.state_file.exists():
        say(f"removing what an earlier run left in {run_dir}")
        stack.down(say)
        stack = TempestStack.load(run_dir)
    return stack


def start(run_dir: Path, say: Say, compute_nodes: int = 1, network: bool = True
          ) -> tuple[TempestStack, Cloud]:
    """Start everything in `run_dir` (with `network`, Neutron on OVN and a chassis per
    host: network.py); the stack (to stop) and what tempest.conf says of it. Whatever an
    interrupted run left there is removed first."""
    stack = fresh_stack(run_dir, say)
    stack.with_network = network
    names = [f"tempest-compute-{number}" for number in range(1, compute_nodes + 1)]
    try:
        stack.up(free_port(), free_port(), say, keystone_port=free_port(),
                 glance_port=free_port(), api_port=free_port(), guests=False,
                 console_port=free_port())
        if network:
            stack.start_chassis(names, say)
        _start_controller(stack, say)
        hosts = [_start_compute(stack, name, say) for name in names]
        _wait_alive(stack, hosts)
        images = _upload_images(stack, say)
        low, high = api_microversions(stack)
        extensions = neutron_extensions(stack.network, stack._keystone()) \
            if stack.network is not None else []
    except BaseException:
        stop(stack, say)
        raise
    keystone = stack._keystone()
    return stack, Cloud(
        auth_url=keystone.auth_url, ca_file=keystone.ca_file,
        admin_password=keystone.admin_password, image_ref=images[0], image_ref_alt=images[1],
        flavor_ref=FLAVOR_REF, flavor_ref_alt=FLAVOR_REF_ALT, min_microversion=low,
        max_microversion=high, compute_nodes=compute_nodes, neutron=network,
        network_extensions=tuple(extensions))


def stop(stack: LocalStack, say: Say, keep_logs: Path | None = None) -> None:
    """Stop and remove everything (the services' logs copied to `keep_logs` first)."""
    if keep_logs is not None and stack.run_dir.is_dir():
        keep_logs.mkdir(parents=True, exist_ok=True)
        for log in stack.run_dir.rglob("*.log"):
            shutil.copy(log, keep_logs / log.name)
    for daemon in stack.daemons:  # the computes and the controller before their services
        if daemon["name"].startswith(("tempest-compute-", "controller")) and \
                pid_alive(daemon["pid"]):
            stop_pid(daemon["pid"], timeout=20)
    if isinstance(stack, TempestStack):
        stack.stop_network(say)
    stack.down(say)


def _daemon(stack: LocalStack, name: str, argv: list[str]) -> int:
    """Start one of our daemons in its own session, logging beside the stack; its pid."""
    log_path = stack.run_dir / f"{name}.log"
    with open(log_path, "ab") as log:
        process = subprocess.Popen([sys.executable, *argv], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   cwd=REPO, start_new_session=True)
    stack.remember_daemon(name, process.pid, str(log_path))
    return process.pid


def _start_controller(stack: TempestStack, say: Say) -> None:
    config = stack.run_dir / "schedule.yaml"  # the operator's (LocalStack.up wrote it)
    if stack.network is not None:  # its scheduler places on the neutron backend's hosts
        operator = yaml.safe_load(config.read_text())
        config = stack.run_dir / "controller.yaml"
        config.write_text(yaml.safe_dump({**operator, "network": stack.network_section()}))
        config.chmod(0o600)
    pid = _daemon(stack, "controller", [str(REPO / "schedule.py"), "--config", str(config),
                                        "serve"])
    say(f"controller started (schedule.py serve, pid {pid})")


def _start_compute(stack: TempestStack, name: str, say: Say) -> str:
    """A fake-driver compute host with its own certificate and etcd role (on the network
    service: plugging its guests' ports on its chassis); its uuid."""
    rp_uuid = str(uuidlib.uuid4())
    state = stack.run_dir / name
    config = {**stack.host_config(rp_uuid), "driver": stack.fake_driver(name),
              "compute": {"uuid": rp_uuid, "name": name, "state_dir": str(state),
                          "instances_dir": str(state / "instances"),
                          "inventory": INVENTORY, "shutdown_timeout_seconds": 10}}
    if stack.network is not None:
        config["network"] = stack.network_section()
    path = stack.run_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    stack.remember_provider(rp_uuid)
    pid = _daemon(stack, name, [str(REPO / "compute.py"), "--config", str(path)])
    say(f"compute {name} started (fake driver, pid {pid}, provider {rp_uuid})")
    return rp_uuid


def _wait_alive(stack: LocalStack, hosts: list[str], timeout: float = 60) -> None:
    with Store(stack.operator_config()["etcd"]) as store:
        deadline = time.monotonic() + timeout
        while not all(store.get(store.keys.alive(host)) for host in hosts):
            dead = [d for d in stack.daemons if not pid_alive(d["pid"])]
            if dead or time.monotonic() > deadline:
                # The run directory goes with the stack: the first one's last words here.
                last = _last_line(Path(dead[0]["log"])) if dead else ""
                raise ServiceUnavailable(
                    f"{', '.join(d['name'] for d in dead) or 'the computes'} "
                    f"{'exited' if dead else 'sent no heartbeat within 60 s'}"
                    f"{f' ({last})' if last else ''}; see the logs in {stack.run_dir}")
            time.sleep(0.2)


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][-300:] if lines else ""


def _upload_images(stack: LocalStack, say: Say) -> list[str]:
    """Two public raw images (1 MiB each, different bytes): image_ref and image_ref_alt."""
    from etcd_compute.glance import GlanceClient

    client = GlanceClient(stack.glance_config())
    ids = []
    for number, name in enumerate(IMAGES, start=1):
        raw = stack.run_dir / f"{name}.raw"
        raw.write_bytes(bytes([number]) * (1 << 20))
        image, _ = local_cloud.upload_image(client, raw, name)
        raw.unlink()
        ids.append(image["id"])
        say(f"image {name} ({image['id']}, raw, public)")
    return ids


def api_microversions(stack: LocalStack) -> tuple[str, str]:
    """The microversions the running API says it serves (its v2.1 version document)."""
    assert stack.compute_api is not None
    root = f"https://127.0.0.1:{stack.compute_api['port']}/"
    verify: str | bool = str(stack.pki.ca_cert)
    if stack.plain:
        root, verify = root.replace("https:", "http:"), True
    versions: list[dict[str, Any]] = requests.get(root, timeout=10,
                                                  verify=verify).json()["versions"]
    (current,) = [v for v in versions if v["id"] == "v2.1"]
    return current["min_version"], current["version"]
