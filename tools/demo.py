#!/usr/bin/env python3
"""`make demo`: the whole system once, on local services, then clean up.

On the neutron network backend (the default, as `make up`'s): starts (or reuses) local
etcd, Placement, Keystone, Glance, the compute API, Neutron on OVN, a hypervisor host in a
network namespace (an OVN chassis) and the namespace "outside" on the external network
`public`; as the demo project's user makes a network, a router to `public` and rules for
SSH and ping; starts the host's compute daemon, schedules one instance with schedule.py
(on the project's network), shows it and the lines its guest printed after reading its
metadata through Neutron, destroys it, shows its allocation is gone; then, through the
`openstack` command line and the compute API, creates a server with a key pair, gives it
a floating IP, logs in to it over SSH from the outside namespace, prints the instance id
the metadata service gave it, deletes the server and everything the demo made in Neutron;
and stops everything it started, by pid.

On the libvirt backend (`--network libvirt`, the seed's shape): the machine's libvirtd and
its NAT network, two compute daemons with distinct identities, the same schedule.py part
and a server created, shown and deleted through the API. With no usable libvirt/qemu it
says so and uses the fake driver.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from etcd_compute import messages  # noqa: E402
from etcd_compute.errors import EtcdComputeError  # noqa: E402
from etcd_compute.etcd import Store  # noqa: E402
from etcd_compute.instances import records  # noqa: E402
from etcd_compute.placement import PlacementClient  # noqa: E402
from tools.local_services import LocalStack, ensure_libvirtd, stop_pid  # noqa: E402
from tools.local_services.stack import HOST, build_test_guest  # noqa: E402

RUN = REPO / "run"
DEMO = RUN / "demo"
VM_FILES = Path("/var/tmp/etcd-compute-demo")
QUERY = "resources=VCPU:1,MEMORY_MB:128,DISK_GB:1"


def say(line: str) -> None:
    print(f"==> {line}", flush=True)


def fail(message: str, fix: str) -> None:
    print(f"error: {message} (fix: {fix})", file=sys.stderr, flush=True)
    raise SystemExit(1)


def real_vm_setup() -> dict | None:
    """Libvirt driver settings for the offline test guest, or None to use the fake driver."""
    if os.environ.get("DEMO_DRIVER") == "fake":
        say("DEMO_DRIVER=fake: using the fake driver (no real VM)")
        return None
    try:
        ensure_libvirtd(RUN)
    except EtcdComputeError as exc:
        say(f"libvirt is not usable here ({exc}): falling back to the fake driver (no real VM)")
        return None
    if shutil.which("qemu-system-x86_64") is None:
        say("qemu is not installed: falling back to the fake driver (no real VM)")
        return None
    say("building the test guest offline from Debian packages (cached after the first time)")
    result = subprocess.run([str(REPO / "tools" / "build-test-guest.sh")], capture_output=True,
                            text=True, check=False)
    lines = result.stdout.strip().splitlines()
    image = Path(lines[-1]) if lines else None
    if result.returncode or image is None or not image.exists():
        reason = (result.stderr.strip().splitlines() or ["no image printed"])[-1]
        say(f"could not build the test guest ({reason}): falling back to the fake driver")
        return None
    say(f"test guest image: {image}")
    # qemu runs as libvirt-qemu, which cannot enter a checkout under a private home.
    VM_FILES.mkdir(parents=True, exist_ok=True)
    VM_FILES.chmod(0o755)
    mdserver_conf = DEMO / "mdserver.conf"
    mdserver_conf.write_text(
        "[mdserver]\nbind_address = 169.254.169.254\nport = 80\n"
        f"instances_dir = {VM_FILES / 'instances'}\nlibvirt_uri = qemu:///system\n"
        f"network = etcd-compute\nlog_file = {DEMO / 'mdserver.log'}\n"
    )
    return {
        "name": "libvirt",
        "libvirt": {
            "uri": "qemu:///system",
            # TCG: KVM exists on many test machines but is unusably slow there.
            "domain_type": os.environ.get("DEMO_DOMAIN_TYPE", "qemu"),
            "default_image": f"file://{image}",
            "image_cache_dir": str(VM_FILES / "images"),
            # file:// images only from where the test guest is built.
            "image_file_dirs": [str(Path(image).parent)],
            "boot_timeout_seconds": 180,
            "mdserver_config": str(mdserver_conf),
        },
    }


def schedule(config: Path, *args: str, check: bool = True, quiet: bool = False) -> str:
    argv = [sys.executable, str(REPO / "schedule.py"), "--config", str(config), *args]
    shown = " ".join(shlex.quote(a) for a in ["schedule.py", *args])
    say(f"$ {shown}")
    result = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=REPO)
    for line in [] if quiet else (result.stdout + result.stderr).strip().splitlines():
        print(f"    {line}", flush=True)
    if check and result.returncode:
        fail(f"{shown} exited {result.returncode}", f"see the compute logs in {DEMO}")
    return result.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true",
                        help="leave services and computes running (stop with: make down)")
    parser.add_argument("--plain", action="store_true",
                        help="plain TCP: no certificates, no RBAC (quick experiments)")
    parser.add_argument("--network", choices=["neutron", "libvirt"], default="neutron",
                        help="the guests' network (default neutron; libvirt: the machine's "
                             "NAT network, the seed's shape)")
    args = parser.parse_args()
    if args.network == "neutron" and os.environ.get("DEMO_DRIVER") == "fake":
        fail("DEMO_DRIVER=fake runs no guest to reach", "make demo NETWORK=libvirt")

    stack = LocalStack.load(RUN)
    already = {name for name in LocalStack.SERVICES if getattr(stack, name)}
    try:
        # Kept running, the cloud is for trying by hand: the dashboard too (as make up).
        stack.up(2379, 8080, say, plain=args.plain, network_backend=args.network,
                 dashboard_port=8443 if args.keep else None)
    except EtcdComputeError as exc:
        fail(str(exc), "make down, or free ports 2379, 8080, 5000, 9292, 8774, 6080 and 8443")
    on_neutron = stack.site_info() is not None
    started_here = set(LocalStack.SERVICES) - already
    computes: list[subprocess.Popen[bytes]] = []
    providers: list[str] = []
    driver: dict = {"name": "fake"}
    config: dict = {}
    made: dict[str, str] = {}
    try:
        DEMO.mkdir(parents=True, exist_ok=True)
        operator = stack.operator_config()
        schedule_config = DEMO / "schedule.yaml"
        if on_neutron:
            image = build_test_guest(say)
            if image is None:
                fail("the test guest could not be built", "see the line above")
            driver = {"name": "libvirt"}
            scheduler = {"default_image": f"file://{image}",
                         # schedule.py's instances are the demo project's, on its network.
                         "project_id": stack._keystone().add_project("demo")}  # noqa: SLF001
            made = demo_network()
            schedule_config.write_text(yaml.safe_dump({
                **operator, "scheduler": scheduler, "network": stack.network_section()}))
        else:
            driver = real_vm_setup() or {"name": "fake"}
            scheduler = {"default_image": driver.get("libvirt", {}).get("default_image",
                                                                         "file:///dev/null")}
            schedule_config.write_text(yaml.safe_dump({**operator, "scheduler": scheduler}))
        on_vm = driver["name"] == "libvirt"
        instances_dir = (VM_FILES if on_vm else DEMO) / "instances"
        for number in (1,) if on_neutron else (1, 2):
            if on_neutron:
                # One host, one compute: its name is its OVN chassis' (Neutron binds the
                # guests' ports to it).
                rp_uuid = str(uuidlib.uuid4())
                config = stack.neutron_host_config(rp_uuid, shutdown_timeout_seconds=10)
                providers.append(rp_uuid)
                path = DEMO / f"compute-{number}.yaml"
                path.write_text(yaml.safe_dump(config))
                log = open(DEMO / f"compute-{number}.log", "ab")
                computes.append(subprocess.Popen(
                    [sys.executable, str(REPO / "compute.py"), "--config", str(path)],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    cwd=REPO, start_new_session=True))
                say(f"compute daemon {HOST} started (pid {computes[-1].pid}, driver libvirt, "
                    f"network neutron, {'plain' if args.plain else 'its own certificate'}, "
                    f"log {log.name})")
                continue
            state = DEMO / f"compute-{number}"
            # Both daemons run on this one host: they share its instances dir (and so
            # its metadata server), each with its own identity and certificate.
            rp_uuid = str(uuidlib.uuid4())
            config = {
                **stack.host_config(rp_uuid), "driver": driver,
                "compute": {"uuid": rp_uuid, "name": f"demo-compute-{number}",
                            "state_dir": str(state), "instances_dir": str(instances_dir),
                            "shutdown_timeout_seconds": 10},
            }
            providers.append(rp_uuid)
            path = DEMO / f"compute-{number}.yaml"
            path.write_text(yaml.safe_dump(config))
            log = open(DEMO / f"compute-{number}.log", "ab")
            computes.append(subprocess.Popen(
                [sys.executable, str(REPO / "compute.py"), "--config", str(path)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                start_new_session=True))
            say(f"compute daemon demo-compute-{number} started (pid {computes[-1].pid}, "
                f"driver {driver['name']}, {'plain' if args.plain else 'its own certificate'}, "
                f"log {log.name})")
        if on_vm and not on_neutron:
            stack.remember_guests(driver["libvirt"]["uri"], "etcd-compute", config,
                                  [str(VM_FILES)])
        store = Store(operator["etcd"])
        both = "the compute daemon" if on_neutron else "both compute daemons"
        wait(lambda: all(store.get(store.keys.alive(rp)) for rp in providers), 60,
             f"{both} to report alive", computes)
        say(f"{both} {'is' if on_neutron else 'are'} alive (heartbeat keys under /alive/)")
        user_data = DEMO / "user-data.txt"
        user_data.write_text("hello-from-the-etcd-compute-demo\n")
        out = schedule(schedule_config, QUERY, "--user-data", str(user_data))
        notified = [line for line in out.splitlines() if line.startswith("NOTIFIED TARGET")]
        instance = notified[0].split()[-1] if notified else None
        if instance is None or not _is_uuid(instance):
            fail("schedule.py printed no instance uuid", "see the output above")
        wait(lambda: _state(store, instance) in ("ACTIVE", "ERROR"), 240,
             f"instance {instance} to become ACTIVE", computes)
        schedule(schedule_config, instance)
        if _state(store, instance) != "ACTIVE":
            fail(f"instance {instance} ended in ERROR", f"see {DEMO}/compute-*.log")
        if on_vm:
            # The guest prints marker lines once it has read its own metadata.
            wait(lambda: "metadata user-data" in _console(store, instance), 120,
                 "the guest to read its metadata", computes)
            out = schedule(schedule_config, "console", instance, quiet=True)
            for line in out.splitlines():
                if "ETCD-COMPUTE-GUEST" in line:
                    print(f"    {line.strip()}", flush=True)
        schedule(schedule_config, "destroy", instance)
        wait(lambda: _state(store, instance) == "DELETED", 120,
             f"instance {instance} to be DELETED", computes)
        schedule(schedule_config, instance)
        allocations = PlacementClient(operator["placement"]).get_allocations(
            instance)["allocations"]
        say(f"allocations of {instance} in Placement: {allocations or 'none (freed)'}")
        if allocations:
            fail("the allocation is still there after destroy", f"see {DEMO}/compute-*.log")
        say("demo finished: schedule -> state -> destroy -> allocation gone")
        if on_neutron:
            from_outside(stack, store, computes)
            say("API demo finished: openstack server create -> floating IP -> ssh from "
                "outside -> metadata -> delete --wait")
        else:
            through_the_api(stack, on_vm, store, computes)
            say("API demo finished: openstack server create -> show -> delete --wait")
        return 0
    finally:
        if made:
            remove_demo_network(made)
        for rp_uuid in providers:
            stack.remember_provider(rp_uuid)
        if args.keep:
            for number, compute in enumerate(computes, start=1):
                stack.remember_daemon(f"demo-compute-{number}", compute.pid,
                                      str(DEMO / f"compute-{number}.log"))
            say("kept running; make status shows it all, make down removes it all")
        else:
            for compute in computes:
                stop_pid(compute.pid, timeout=20)
            say(f"stopped {len(computes)} compute daemon(s)")
            if started_here:
                stack.down(say)  # everything, the demo's providers and guests included
            else:
                stack.remove_demo_pieces(say, [str(VM_FILES)])


OPENSTACK = REPO / ".venv-clients" / "bin" / "openstack"
FAKE_IMAGE = "etcd-compute-fake-guest"


def openstack(cloud: str, *args: str, check: bool = True) -> str:
    """The `openstack` command line with run/clouds.yaml, shown as it runs."""
    shown = " ".join(shlex.quote(a) for a in ["openstack", "--os-cloud", cloud, *args])
    say(f"$ {shown}")
    result = subprocess.run([str(OPENSTACK), "--os-cloud", cloud, *args], capture_output=True,
                            text=True, check=False, cwd=REPO, timeout=600,
                            env={**os.environ, "OS_CLIENT_CONFIG_FILE": str(RUN / "clouds.yaml")})
    for line in (result.stdout + result.stderr).strip().splitlines():
        print(f"    {line}", flush=True)
    if result.returncode and check:
        fail(f"{shown} exited {result.returncode}",
             f"see {RUN / 'compute-api.log'} and the compute logs in {DEMO}")
    return result.stdout


DEMO_CLOUD = "etcd-compute-demo"
DEMO_NET, DEMO_CIDR = "demo-net", "10.1.0.0/24"


def demo_network() -> dict[str, str]:
    """As the demo project's user: a network and subnet, a router with its gateway on
    `public` and an interface on the subnet, and its default security group opened to SSH
    and ping. What it made, for remove_demo_network."""
    made: dict[str, str] = {}
    made["network"] = openstack(DEMO_CLOUD, "network", "create", DEMO_NET, "-f", "value",
                                "-c", "id").strip()
    openstack(DEMO_CLOUD, "subnet", "create", "--network", DEMO_NET, "--subnet-range",
              DEMO_CIDR, "demo-subnet", "-f", "value", "-c", "id")
    made["router"] = openstack(DEMO_CLOUD, "router", "create", "demo-router", "-f", "value",
                               "-c", "id").strip()
    openstack(DEMO_CLOUD, "router", "set", "--external-gateway", "public", "demo-router")
    openstack(DEMO_CLOUD, "router", "add", "subnet", "demo-router", "demo-subnet")
    made["rules"] = " ".join(
        openstack(DEMO_CLOUD, "security", "group", "rule", "create", "--ingress",
                  "--protocol", protocol, *extra, "default", "-f", "value", "-c", "id").strip()
        for protocol, extra in (("tcp", ("--dst-port", "22")), ("icmp", ())))
    return made


def remove_demo_network(made: dict[str, str]) -> None:
    """What demo_network made, in reverse (each step tried: the demo may have stopped
    half-way)."""
    steps = [("router", "remove", "subnet", "demo-router", "demo-subnet"),
             ("router", "delete", made.get("router", "")),
             ("network", "delete", made.get("network", "")),
             ("security", "group", "rule", "delete", *made.get("rules", "").split())]
    for step in steps:
        if all(step):
            openstack(DEMO_CLOUD, *step, check=False)


def from_outside(stack: LocalStack, store: Store,
                 computes: list[subprocess.Popen[bytes]]) -> None:
    """As the demo project's user: a key pair, a server on the project's network, a
    floating IP on `public` for it; from the outside namespace, SSH in with the key and
    ask the metadata service for the instance id; then everything deleted."""
    info = stack.site_info()
    assert info is not None
    key = DEMO / "demo-key"
    for path in (key, key.with_suffix(".pub"), DEMO / "known_hosts"):
        path.unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    openstack(DEMO_CLOUD, "keypair", "create", "--public-key", str(key.with_suffix(".pub")),
              "demo-key", "-f", "value", "-c", "name")
    server = floating = ""
    try:
        began = time.monotonic()
        created = openstack(DEMO_CLOUD, "server", "create", "--flavor", "m1.tiny", "--image",
                            "etcd-compute-test-guest", "--network", DEMO_NET, "--key-name",
                            "demo-key", "--wait", "-f", "value", "-c", "id", "-c", "status",
                            "demo-api-server").split()
        server = next((word for word in created if _is_uuid(word)), "")
        if not server:
            fail("openstack server create printed no server id", "see the output above")
        active = time.monotonic() - began
        floating = openstack(DEMO_CLOUD, "floating", "ip", "create", "public", "-f", "value",
                             "-c", "floating_ip_address").strip()
        openstack(DEMO_CLOUD, "server", "add", "floating", "ip", server, floating)
        openstack(DEMO_CLOUD, "server", "show", server, "-c", "status", "-c", "addresses",
                  "-c", "flavor", "-c", "image")
        netns = info["outside"]["netns"]
        command = "id -un; wget -qO- http://169.254.169.254/latest/meta-data/instance-id; echo"
        argv = ["ip", "netns", "exec", netns, "ssh", "-F", "none", "-i", str(key), "-o",
                "BatchMode=yes", "-o", "ConnectTimeout=5", "-o",
                "StrictHostKeyChecking=accept-new", "-o",
                f"UserKnownHostsFile={DEMO / 'known_hosts'}", f"root@{floating}", command]
        say(f"$ {' '.join(shlex.quote(a) for a in argv)}")
        say(f"   (run/outside is `ip netns exec {netns}`: the user's laptop, on public only)")
        deadline = time.monotonic() + 120
        while True:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60,
                                  check=False)
            if done.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        for line in (done.stdout + done.stderr).strip().splitlines():
            print(f"    {line}", flush=True)
        reached = time.monotonic() - began
        if done.returncode or server not in done.stdout:
            fail(f"ssh root@{floating} from outside did not print the instance id",
                 f"see {DEMO}/compute-*.log and the guest's console (openstack console log "
                 "show demo-api-server)")
        say(f"server create -> ACTIVE {active:.1f} s, -> SSH from outside with the metadata's "
            f"instance id {reached:.1f} s")
    finally:
        if server:
            openstack(DEMO_CLOUD, "server", "delete", "--wait", server, check=False)
            wait(lambda: _state(store, server) in ("DELETED", None), 120,
                 f"server {server} to be DELETED", computes)
        if floating:
            openstack(DEMO_CLOUD, "floating", "ip", "delete", floating, check=False)
        openstack(DEMO_CLOUD, "keypair", "delete", "demo-key", check=False)


def through_the_api(stack: LocalStack, on_vm: bool, store: Store,
                    computes: list[subprocess.Popen[bytes]]) -> None:
    """A user of the demo project creates, shows and deletes one server with the
    `openstack` command line. The fake driver runs no qemu image (the test guest asks
    for hypervisor_type qemu): it boots a small image of its own, made once in Glance."""
    if not OPENSTACK.exists():
        fail(f"{OPENSTACK} is missing", "make install")
    image = "etcd-compute-test-guest"
    if not on_vm:
        image = FAKE_IMAGE
        if not openstack("etcd-compute", "image", "list", "--name", FAKE_IMAGE, "-f",
                         "value", "-c", "ID").strip():
            raw = DEMO / "fake-guest.raw"
            raw.write_bytes(b"\0" * (1 << 20))
            openstack("etcd-compute", "image", "create", "--public", "--disk-format", "raw",
                      "--container-format", "bare", "--file", str(raw), FAKE_IMAGE,
                      "-f", "value", "-c", "id")
    created = openstack("etcd-compute-demo", "server", "create", "--flavor", "m1.tiny",
                        "--image", image, "--wait", "-f", "value", "-c", "id", "-c", "status",
                        "demo-api-server").split()
    if not created or not _is_uuid(created[-1]) and not _is_uuid(created[0]):
        fail("openstack server create printed no server id", "see the output above")
    server = created[0] if _is_uuid(created[0]) else created[-1]
    openstack("etcd-compute-demo", "server", "show", server, "-c", "status", "-c", "addresses",
              "-c", "flavor", "-c", "image")
    openstack("etcd-compute-demo", "server", "delete", "--wait", server)
    wait(lambda: _state(store, server) in ("DELETED", None), 120,
         f"server {server} to be DELETED", computes)


def _is_uuid(text: str) -> bool:
    try:
        return str(uuidlib.UUID(text)) == text
    except ValueError:
        return False


def _state(store: Store, instance: str) -> str | None:
    return records.find(store, instance)[1].state


def _console(store: Store, instance: str) -> str:
    host, _ = records.find(store, instance)
    if host is None:
        return ""
    console, _ = store.read(messages.CONSOLE, store.keys.console(host, instance))
    return console["text"] if console else ""


def wait(predicate: Callable[[], bool], timeout: float, what: str,
         computes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if any(compute.poll() is not None for compute in computes):
            fail("a compute daemon exited", f"see {DEMO}/compute-*.log")
        time.sleep(0.5)
    fail(f"timed out after {timeout:.0f} s waiting for {what}", f"see {DEMO}/compute-*.log")


if __name__ == "__main__":
    sys.exit(main())
