#!/usr/bin/env python3
"""Guests on Neutron ports (issue 32): what a port costs a guest's start, many starts at
once, the datapath between two hosts, and the network's idle cost on a host, each against
the libvirt NAT network (the other backend) or nothing, in the same run.

    .venv/bin/python bench/network.py           # 5 rounds, 20 at once: results/network.json
    .venv/bin/python bench/network.py --quick   # 3 rounds, 6 at once: network-quick.json (~10 min)

The full mode's 20 at once on the libvirt network can take over 15 min on a loaded machine (its
builds wait on libvirt's nwfilter updates one by one; bench/REPORT.md): `--at-once` sets K.

Two hypervisor hosts on this machine (tools/local_services/ovn_hypervisors.py: each a
network namespace that is an OVN chassis, OVS with the userspace (netdev) datapath and
ovn-controller, with a private libvirtd plugged into its OVS), Neutron ML2/OVN on MariaDB
and OVN central behind a Keystone (tools/local_services/networking.py), demo's tenant
network, and the probe port in a namespace of its own standing in for the gateway, as the
tests set them up (tests/network/guests.py, whose plain helpers are reused). Guests are
the test guest under TCG with 128 MiB, built by the compute's worker (worker.build, as
compute.py's pool runs it): on the neutron backend it makes the port, plugs it and waits
until Neutron says ACTIVE; on the libvirt backend the guest joins a libvirt NAT network
made on hv1's libvirtd.

1. Create -> build returned (for Neutron: the port ACTIVE) and create -> ready (the
   guest's "ETCD-COMPUTE-GUEST ready" console line), one guest at a time on hv1, Neutron
   and the libvirt network alternating, N rounds: p50 each. Target: Neutron <= +1 s p50.
2. K guests at once on hv1 through a pool of compute.workers (4) worker processes, as
   compute.py has it: wall time until all are ready, Neutron / libvirt. Target <= 1.5x.
3. The datapath across the Geneve tunnel (hv1 <-> hv2, netdev datapath): busybox ping
   from guest A (hv1) to guest B (hv2), run over ssh through the probe, and from the probe
   (hv1) to B, and between two OVS internal ports in namespaces on the two hosts (no
   guest: the datapath alone); 50 pings at 0.2 s each, p50/p99. TCP: guest B streams
   zeros with busybox `nc` to the probe; and the two internal ports, Python sockets.
4. The idle cost per host: RSS, PSS and CPU% over 30 s of ovsdb-server, ovs-vswitchd and
   ovn-controller (hv2, its guests gone), and of the OVN metadata agent with its privsep
   daemons and haproxy (a third chassis with the agent and a port bound there, as
   tools/local_services/ovn_hosts.py runs it); the baseline is nothing (a host of the
   libvirt backend runs none of them; its network's dnsmasq is measured beside).

Everything is started here and stopped by pid; the namespaces and bridges are removed.
bench/report.py adds the figures to bench/REPORT.md (when network.json exists).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import libvirt  # noqa: E402
import psutil  # noqa: E402

from bench.services import checkout_commit, machine_line, save_results, say  # noqa: E402
from bench.stats import percentile  # noqa: E402
from etcd_compute.compute import worker  # noqa: E402
from etcd_compute.config import deep_merge  # noqa: E402
from etcd_compute.neutron import NeutronClient  # noqa: E402
from etcd_compute.pki import Pki  # noqa: E402
from tests.network.guests import (  # noqa: E402
    ADMIN,
    PROBE_IP,
    READY,
    Worker,
    build_test_guest,
    keypair,
    libvirt_network_on,
    probe,
    spec_for,
    ssh,
)
from tests.network.neutron import DEMO, OPENSTACK, Cli  # noqa: E402
from tests.network.test_ports_on_ovn_chassis import tcp_transfer  # noqa: E402
from tests.openstack_shell import OpenStackShells  # noqa: E402
from tests.virt.conftest import GUEST_CACHE  # noqa: E402
from tools.local_services import KeystoneServer, cloud, free_port  # noqa: E402
from tools.local_services.netns import Host, ip, netns_usable  # noqa: E402
from tools.local_services.networking import NetworkStack  # noqa: E402
from tools.local_services.ovn_hosts import OvnHosts  # noqa: E402
from tools.local_services.ovn_hypervisors import OvnHypervisor, OvnHypervisors  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = Path("/var/tmp/etcd-compute-bench")
NAT, NAT_CIDR = "etcd-compute-nat", "192.168.127.0/24"
CIDR = "10.0.0.0/24"
PAIR_IPS = ("10.0.0.240", "10.0.0.241")
GUEST_MIB = 128
TIMEOUT = 600.0


def until(what: str, check: Any, timeout: float = TIMEOUT, interval: float = 0.05) -> float:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if check():
            return time.monotonic() - started
        time.sleep(interval)
    raise TimedOut(f"bench/network.py: timed out after {timeout:.0f} s waiting for {what}")


class TimedOut(Exception):
    pass


class Pool(Worker):
    """A host's worker processes, `processes` of them (compute.workers), as compute.py's."""

    def __init__(self, config: dict[str, Any], processes: int):  # noqa: D107
        self.pool = concurrent.futures.ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"),
            initializer=worker.init_worker, initargs=(config,))


def load() -> str:
    return Path("/proc/loadavg").read_text().strip()


# --- the stack ---------------------------------------------------------------------------


@contextlib.contextmanager
def stack(run_dir: Path) -> Iterator[tuple[KeystoneServer, NetworkStack, Cli]]:
    """Keystone (bootstrapped as the tests' session is), Neutron on OVN, and the `openstack`
    command line's shells on them; stopped by pid after."""
    pki = Pki(run_dir / "pki")
    pki.init("etcd-compute-bench")
    keystone = KeystoneServer.create(run_dir / "keystone", pki=pki)
    network: NetworkStack | None = None
    shells: OpenStackShells | None = None
    try:
        keystone.start()
        cloud.bootstrap(keystone)
        network = NetworkStack.create(run_dir / "network", keystone, pki=pki).start()
        clouds = cloud.write_clouds_yaml(keystone, run_dir / "clouds.yaml")
        shells = OpenStackShells(OPENSTACK.parent / "python",
                                 {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})
        yield keystone, network, Cli(shells)
    finally:
        if shells is not None:
            shells.close()
        if network is not None:
            network.stop()
        keystone.stop()


def neutron_settings(network: NetworkStack, keystone: KeystoneServer) -> dict[str, Any]:
    verify = network.neutron.verify
    return {"endpoint": network.neutron.endpoint,
            "ca_cert": verify if isinstance(verify, str) else None, "timeout": 30.0,
            "keystone": cloud.service_credentials(keystone),
            "integration_bridge": "br-int", "vif_plugging_timeout": 120,
            "vif_plugging_is_fatal": True}


def libvirt_network(host: OvnHypervisor) -> dict[str, Any]:
    """A libvirt NAT network on `host`'s libvirtd (as the tests' comparison makes it) and
    the compute config of a host of the libvirt backend on it."""
    ip("-n", host.chassis.space.netns, "addr", "replace", "169.254.169.254/32", "dev", "lo")
    libvirt_network_on(host, NAT, NAT_CIDR, f"ecn{uuidlib.uuid4().hex[:8]}")
    return deep_merge(host.config, {"network": {"backend": "libvirt"}, "driver": {
        "libvirt": {"network": NAT, "network_cidr": NAT_CIDR}}})


def remove_libvirt_network(host: OvnHypervisor) -> None:
    connection = libvirt.open(host.libvirtd.uri)
    try:
        net = connection.networkLookupByName(NAT)
        if net.isActive():
            net.destroy()
        net.undefine()
    finally:
        connection.close()


# --- 1. one at a time --------------------------------------------------------------------


def timed(runner: Worker, host: OvnHypervisor, spec: dict[str, Any],
          neutron: NeutronClient | None) -> dict[str, float]:
    """Create -> the build's return (on Neutron: the port ACTIVE, checked) and -> ready;
    destroyed after."""
    try:
        began = time.monotonic()
        result = runner.build(spec).result(timeout=TIMEOUT)
        built = time.monotonic() - began
        if neutron is not None:
            (port_id,) = result["ports"]
            status = neutron.port(port_id)["status"]
            if status != "ACTIVE":
                raise SystemExit(f"bench/network.py: port {port_id} {status} after the build")
        until(f"{spec['uuid']} ready", lambda: READY in host.console(spec["uuid"]))
        return {"built": round(built, 3), "ready": round(time.monotonic() - began, 3)}
    finally:
        runner.destroy(spec["uuid"])


def one_at_a_time(host: OvnHypervisor, ports: Worker, nat: Worker, image: str,
                  tenant: dict[str, Any], neutron: NeutronClient, rounds: int
                  ) -> dict[str, list[dict[str, float]]]:
    times: dict[str, list[dict[str, float]]] = {"neutron": [], "libvirt": []}
    for index in range(rounds):
        order = ["neutron", "libvirt"] if index % 2 == 0 else ["libvirt", "neutron"]
        for kind in order:
            if kind == "neutron":
                spec = spec_for(host, image, tenant["project_id"],
                                networks=[{"uuid": tenant["id"]}])
                times[kind].append(timed(ports, host, spec, neutron))
            else:
                times[kind].append(timed(nat, host, spec_for(host, image, "p"), None))
        say(f"round {index + 1}/{rounds}: neutron {times['neutron'][-1]}, "
            f"libvirt {times['libvirt'][-1]}")
    return times


# --- 2. many at once ---------------------------------------------------------------------


def at_once(host: OvnHypervisor, pool: Worker, specs: list[dict[str, Any]]) -> dict[str, Any]:
    """K builds submitted at once: until all returned, and until all are ready."""
    began = time.monotonic()
    futures = [pool.build(spec) for spec in specs]
    try:
        for future in futures:
            future.result(timeout=TIMEOUT)
        built = time.monotonic() - began
        until("all ready", lambda: all(READY in host.console(s["uuid"]) for s in specs),
              interval=0.2)
        return {"count": len(specs), "built": round(built, 3),
                "ready": round(time.monotonic() - began, 3)}
    finally:
        concurrent.futures.wait(futures, timeout=TIMEOUT)
        list(concurrent.futures.ThreadPoolExecutor(8).map(
            lambda s: pool.destroy(s["uuid"]), specs))


# --- 3. the datapath ---------------------------------------------------------------------


def pings(text: str) -> list[float]:
    return [float(t) for t in re.findall(r"time=([\d.]+) ms", text)]


def ping_stats(text: str, sent: int) -> dict[str, Any]:
    times = pings(text)
    return {"sent": sent, "received": len(times),
            "p50_ms": percentile(times, 50) if times else None,
            "p99_ms": percentile(times, 99) if times else None,
            "max_ms": max(times) if times else None, "samples_ms": times}


def busybox() -> str:
    return shutil.which("busybox") or "busybox"


def netns_ping(space: Host, address: str, count: int) -> dict[str, Any]:
    done = subprocess.run(["ip", "netns", "exec", space.netns, busybox(), "ping", "-c",
                           str(count), "-i", "0.2", "-W", "2", address],
                          capture_output=True, text=True, timeout=count + 60, check=False)
    return ping_stats(done.stdout, count)


# Counts what one connection sends until it closes, timed from its first byte; says when
# it listens. (Run in the probe's namespace: busybox nc in the guest sends.)
RECEIVER = """
import socket, sys, time
with socket.create_server((sys.argv[1], int(sys.argv[2]))) as server:
    print("listening", flush=True)
    connection, _ = server.accept()
    received, first = 0, None
    while chunk := connection.recv(1 << 16):
        first = first or time.monotonic()
        received += len(chunk)
    print(received, time.monotonic() - (first or time.monotonic()), flush=True)
"""


def guest_stream(prober: Host, key: Path, known: Path, address: str, mib: int) -> dict[str, Any]:
    """Guest `address` sends `mib` MiB of zeros with busybox nc to the probe (TCP)."""
    receiver = subprocess.Popen(["ip", "netns", "exec", prober.netns, sys.executable, "-c",
                                 RECEIVER, PROBE_IP, "5002"], stdout=subprocess.PIPE, text=True)
    try:
        assert receiver.stdout is not None and receiver.stdout.readline() == "listening\n"
        sent = ssh(prober, key, known, address,
                   f"dd if=/dev/zero bs=65536 count={mib * 16} 2>/dev/null "
                   f"| nc {PROBE_IP} 5002")
        line = receiver.stdout.readline().split()
        receiver.wait(timeout=30)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.wait()
    if sent.returncode != 0 or not line or int(line[0]) != mib << 20:
        return {"error": f"nc exited {sent.returncode} ({sent.stderr.strip()[-300:]}); "
                         f"received {line}"}
    seconds = float(line[1])
    return {"bytes": mib << 20, "seconds": round(seconds, 3),
            "mbit_s": round((mib << 20) * 8 / seconds / 1e6, 1)}


def port_pair(cli: Cli, hosts: OvnHypervisors, tenant: dict[str, Any],
              neutron: NeutronClient) -> tuple[list[Host], list[str]]:
    """A port of demo's on hv1 and one on hv2, each an OVS internal port moved into a
    namespace of its own with its fixed IP (as test_ports_on_ovn_chassis.py plugs them)."""
    spaces, ports = [], []
    for name, address in zip(("hv1", "hv2"), PAIR_IPS, strict=True):
        port = cli(ADMIN, "port", "create", "--network", tenant["id"], "--project",
                   tenant["project_id"], "--host", name, "--device-owner", "probe",
                   "--fixed-ip", f"subnet={tenant['subnet']['id']},ip-address={address}",
                   f"pair-{name}")
        ports.append(port["id"])
        chassis = hosts[name].chassis
        device = chassis.plug(port["id"], port["mac_address"])
        space = hosts.chassis.net.add_space(f"pair-{name}")
        chassis.move(device, space, address, tenant["mtu"])
        spaces.append(space)
    for port_id in ports:
        until("the pair's ports ACTIVE", lambda p=port_id: neutron.port(p)["status"] == "ACTIVE",
              timeout=120, interval=0.2)
    return spaces, ports


def datapath(cli: Cli, hosts: OvnHypervisors, workers: dict[str, Worker], image: str,
             tenant: dict[str, Any], neutron: NeutronClient, prober: Host, run_dir: Path,
             count: int, guest_mib: int, pair_mib: int) -> dict[str, Any]:
    key = keypair(run_dir / "id_guest")
    known = run_dir / "known_hosts"
    specs = {name: spec_for(hosts[name], image, tenant["project_id"],
                            networks=[{"uuid": tenant["id"]}],
                            ssh_key=(run_dir / "id_guest.pub").read_text().strip())
             for name in ("hv1", "hv2")}
    out: dict[str, Any] = {"pings": count, "interval_s": 0.2}
    building = {name: workers[name].build(spec) for name, spec in specs.items()}
    try:
        addresses = {name: f.result(timeout=TIMEOUT)["ip"] for name, f in building.items()}
        for name, spec in specs.items():
            until(f"{name}'s guest ready", lambda n=name, s=spec: READY in hosts[n].console(
                s["uuid"]), interval=0.2)
        have_nc = ssh(prober, key, known, addresses["hv2"], "which nc && which ping")
        out["guest_has_nc"] = have_nc.returncode == 0
        done = ssh(prober, key, known, addresses["hv1"],
                   f"ping -c {count} -i 0.2 -W 2 {addresses['hv2']}")
        out["guest_to_guest"] = ping_stats(done.stdout, count)
        say(f"guest -> guest over Geneve: {out['guest_to_guest']}")
        out["probe_to_guest"] = netns_ping(prober, addresses["hv2"], count)
        say(f"probe (hv1) -> guest (hv2): {out['probe_to_guest']}")
        if out["guest_has_nc"]:
            out["guest_tcp"] = guest_stream(prober, key, known, addresses["hv2"], guest_mib)
            say(f"guest (hv2) -> probe (hv1), busybox nc: {out['guest_tcp']}")
    finally:
        for name, spec in specs.items():
            concurrent.futures.wait([building[name]], timeout=TIMEOUT)
            workers[name].destroy(spec["uuid"])
    spaces, ports = port_pair(cli, hosts, tenant, neutron)
    try:
        out["ports_ping"] = netns_ping(spaces[0], PAIR_IPS[1], count)
        say(f"OVS internal port hv1 -> hv2: {out['ports_ping']}")
        seconds = min(tcp_transfer(spaces[0], spaces[1], PAIR_IPS[1], pair_mib << 20)
                      for _ in range(3))
        out["ports_tcp"] = {"bytes": pair_mib << 20, "seconds": round(seconds, 3),
                            "mbit_s": round((pair_mib << 20) * 8 / seconds / 1e6, 1),
                            "of": 3}
        say(f"OVS internal ports hv1 -> hv2, TCP: {out['ports_tcp']}")
    finally:
        for name, port_id in zip(("hv1", "hv2"), ports, strict=True):
            hosts[name].chassis.unplug(f"tap{port_id[:11]}")
            cli.run(ADMIN, "port", "delete", port_id)
    return out


# --- 4. idle cost ------------------------------------------------------------------------


def idle(named: dict[str, list[int]], seconds: float) -> dict[str, Any]:
    """RSS, PSS (MiB) and CPU% (of one core) over `seconds` of each group's processes."""
    procs: dict[str, list[psutil.Process]] = {}
    for group, pids in named.items():
        found: dict[int, psutil.Process] = {}
        for pid in pids:  # and their children: ovs-vswitchd --monitor forks the daemon
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                for one in [process, *process.children(recursive=True)]:
                    found[one.pid] = one
        procs[group] = list(found.values())

    def cpu(process: psutil.Process) -> float:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            return times.user + times.system
        return 0.0

    before = {g: [cpu(p) for p in ps] for g, ps in procs.items()}
    machine = psutil.cpu_times()
    time.sleep(seconds)
    machine_after = psutil.cpu_times()
    out: dict[str, Any] = {"seconds": seconds, "groups": {}}
    for group, ps in procs.items():
        rows = []
        for process, was in zip(ps, before[group], strict=True):
            with contextlib.suppress(psutil.Error):
                memory = process.memory_full_info()
                rows.append({"pid": process.pid, "name": process.name(),
                             "rss_mib": round(memory.rss / 2**20, 1),
                             "pss_mib": round(memory.pss / 2**20, 1),
                             "cpu_percent": round((cpu(process) - was) / seconds * 100, 2)})
        out["groups"][group] = {
            "processes": rows,
            "rss_mib": round(sum(r["rss_mib"] for r in rows), 1),
            "pss_mib": round(sum(r["pss_mib"] for r in rows), 1),
            "cpu_percent": round(sum(r["cpu_percent"] for r in rows), 2)}
    busy = (sum(machine_after) - machine_after.idle - machine_after.iowait) - (
        sum(machine) - machine.idle - machine.iowait)
    out["machine_cpu_percent_of_2_cores"] = round(busy / seconds * 100 / psutil.cpu_count(), 1)
    return out


def names(pids: list[int]) -> set[str]:
    found = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            found.add(psutil.Process(pid).name())
    return found


def dnsmasq_pids(host: OvnHypervisor) -> list[int]:
    """The libvirt network's dnsmasq: the pidfile libvirtd wrote for it."""
    found = []
    for pidfile in host.libvirtd.root.rglob(f"{NAT}.pid"):
        with contextlib.suppress(ValueError, OSError):
            found.append(int(pidfile.read_text().strip()))
    return [p for p in found if psutil.pid_exists(p)]


def metadata_host(network: NetworkStack, cli: Cli, tenant: dict[str, Any], run_dir: Path,
                  neutron: NeutronClient) -> tuple[OvnHosts, str]:
    """A third chassis with the OVN metadata agent (its API port: nothing listens, the idle
    agent asks nothing) and a port of the tenant network bound there, so the agent makes
    the network's namespace and haproxy."""
    hosts = OvnHosts.create(["md"], run_dir / "md", network.ovn, metadata_port=free_port())
    try:
        return hosts, bound_on_md(hosts, cli, tenant, neutron)
    except BaseException:
        hosts.close()
        raise


def bound_on_md(hosts: OvnHosts, cli: Cli, tenant: dict[str, Any],
                neutron: NeutronClient) -> str:
    port = cli(ADMIN, "port", "create", "--network", tenant["id"], "--project",
               tenant["project_id"], "--host", "md", "--device-owner", "probe", "md-port")
    hosts["md"].plug(port["id"], port["mac_address"])
    until("md's port ACTIVE", lambda: neutron.port(port["id"])["status"] == "ACTIVE",
          timeout=120, interval=0.2)
    agent = hosts["md"].metadata
    assert agent is not None
    until("the agent's haproxy", lambda: "haproxy" in names(agent.pids), timeout=120,
          interval=0.5)
    return str(port["id"])


# --- the run -----------------------------------------------------------------------------


def summary(results: dict[str, Any]) -> dict[str, Any]:
    one = results["one_at_a_time"]
    s: dict[str, Any] = {}
    for kind in ("neutron", "libvirt"):
        s[f"{kind}_built_p50"] = percentile([r["built"] for r in one[kind]], 50)
        s[f"{kind}_ready_p50"] = percentile([r["ready"] for r in one[kind]], 50)
    s["ready_p50_delta_s"] = s["neutron_ready_p50"] - s["libvirt_ready_p50"]
    many = results["at_once"]
    s["at_once_ratio"] = many["neutron"]["ready"] / many["libvirt"]["ready"]
    return s


def targets(results: dict[str, Any]) -> list[tuple[str, str, str]]:
    s = results["summary"]
    delta = s["ready_p50_delta_s"]
    ratio = s["at_once_ratio"]
    k = results["at_once"]["neutron"]["count"]
    return [
        ("create -> ready p50, Neutron port <= libvirt network + 1 s",
         f"{s['neutron_ready_p50']:.2f} vs {s['libvirt_ready_p50']:.2f} s ({delta:+.2f} s)",
         "met" if delta <= 1 else f"MISSED by {delta - 1:.2f} s"),
        (f"{k} at once, wall time until all ready, Neutron / libvirt <= 1.5x",
         f"{results['at_once']['neutron']['ready']:.1f} vs "
         f"{results['at_once']['libvirt']['ready']:.1f} s ({ratio:.2f}x)",
         "met" if ratio <= 1.5 else f"MISSED ({ratio / 1.5:.2f}x the target)"),
    ]


def _ping_row(label: str, p: dict[str, Any] | None) -> str:
    if not p or p.get("p50_ms") is None:
        return f"| {label} | not measured | | |"
    return (f"| {label} | {p['p50_ms']:.2f} | {p['p99_ms']:.2f} | "
            f"{p['received']}/{p['sent']} |")


def markdown(results: dict[str, Any]) -> list[str]:
    """The section bench/REPORT.md gets (bench/report.py adds it when network.json exists)."""
    st, s, d, idle_ = results["settings"], results["summary"], results["datapath"], \
        results["idle"]
    one = results["one_at_a_time"]
    lines = [
        f"## Issue 32: guests on Neutron ({results['date'].split()[0]})",
        "",
        f"Generated by `bench/network.py{' --quick' if st['quick'] else ''}` "
        f"({results['date']}, {results['duration_seconds']:.0f} s, at {results['commit']}; "
        f"results/{results['file']}). Machine: {results['machine']}. Load (1/5/15 min) "
        f"before `{results['load_before']}`, after `{results['load_after']}`: the machine is "
        "shared (other helpers' VM tests ran beside), compare within the run.",
        "",
        "Two hypervisor hosts in network namespaces, each an OVN chassis (Open vSwitch on "
        "the userspace **netdev** datapath, ovn-controller) with a private libvirtd on its "
        "OVS; Neutron ML2/OVN on MariaDB and OVN central behind Keystone; demo's tenant "
        "network, a probe port standing in for its gateway. The test guest under TCG, "
        f"{GUEST_MIB} MiB, built by the compute's worker: on the neutron backend it makes "
        "the port, plugs it (OVS virtualport) and waits for ACTIVE; the baseline is the "
        "libvirt backend on a libvirt NAT network of the same host's libvirtd.",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
        *[f"| {t} | {m} | {v} |" for t, m, v in targets(results)],
        "",
        f"**One at a time** on hv1, alternating, {st['rounds']} rounds (seconds):",
        "",
        "| round | Neutron: build (port ACTIVE) | Neutron: ready | libvirt: build | "
        "libvirt: ready |",
        "|---|---|---|---|---|",
    ]
    for i, (n, v) in enumerate(zip(one["neutron"], one["libvirt"], strict=True), 1):
        lines.append(f"| {i} | {n['built']:.2f} | {n['ready']:.2f} | {v['built']:.2f} | "
                     f"{v['ready']:.2f} |")
    lines += [f"| p50 | {s['neutron_built_p50']:.2f} | {s['neutron_ready_p50']:.2f} | "
              f"{s['libvirt_built_p50']:.2f} | {s['libvirt_ready_p50']:.2f} |", ""]
    many = results["at_once"]
    lines += [
        f"**{many['neutron']['count']} at once** on hv1 through "
        f"{results['settings_workers']} worker processes (compute.workers): "
        "Neutron all built (ports ACTIVE) "
        f"{many['neutron']['built']:.1f} s, all ready {many['neutron']['ready']:.1f} s; "
        f"libvirt all built {many['libvirt']['built']:.1f} s, all ready "
        f"{many['libvirt']['ready']:.1f} s ({s['at_once_ratio']:.2f}x).",
        "",
        f"**The datapath** hv1 -> hv2 across Geneve (netdev datapath), {d['pings']} busybox "
        "pings at 0.2 s:",
        "",
        f"![{results['file'].replace('.json', '.png')}](results/"
        f"{results['file'].replace('.json', '.png')})",
        "",
        "| path | p50 ms | p99 ms | replies |",
        "|---|---|---|---|",
        _ping_row("guest A (hv1) -> guest B (hv2), over ssh through the probe",
                  d.get("guest_to_guest")),
        _ping_row("probe (netns on hv1) -> guest B (hv2)", d.get("probe_to_guest")),
        _ping_row("OVS internal port in a netns on hv1 -> one on hv2 (no guest)",
                  d.get("ports_ping")),
        "",
    ]
    tcp = []
    g = d.get("guest_tcp")
    if g and "mbit_s" in g:
        tcp.append(f"guest B (hv2, TCG) -> probe (hv1), busybox `nc`: "
                   f"{g['bytes'] >> 20} MiB in {g['seconds']:.2f} s, {g['mbit_s']:.0f} Mbit/s")
    elif g:
        tcp.append(f"guest -> probe: {g.get('error')}")
    else:
        tcp.append("the guest has no `nc`: guest TCP not measured")
    p = d["ports_tcp"]
    tcp.append(f"OVS internal port on hv1 -> one on hv2 (Python sockets, best of {p['of']}): "
               f"{p['bytes'] >> 20} MiB in {p['seconds']:.2f} s, {p['mbit_s']:.0f} Mbit/s")
    lines += ["**TCP** across the tunnel: " + "; ".join(tcp) + ".", ""]
    lines += [
        f"**Idle cost per host** over {idle_['seconds']:.0f} s (CPU% of one core; the "
        "baseline, a libvirt-backend host, runs none of these; its network's dnsmasq "
        "beside):",
        "",
        "| processes | RSS MiB | PSS MiB | CPU % |",
        "|---|---|---|---|",
    ]
    for group, row in idle_["groups"].items():
        names = ", ".join(sorted({p["name"] for p in row["processes"]})) or "none found"
        lines.append(f"| {group} ({names}) | {row['rss_mib']:.1f} | {row['pss_mib']:.1f} | "
                     f"{row['cpu_percent']:.2f} |")
    if idle_.get("metadata_error"):
        lines.append(f"| metadata agent | not measured: {idle_['metadata_error']} | | |")
    lines += ["", f"The machine's CPU over the window: "
              f"{idle_['machine_cpu_percent_of_2_cores']:.0f}% of its 2 cores (others' work "
              "included).", ""]
    return lines


def plot(results: dict[str, Any], path: Path) -> None:
    """Create -> ready per round for both backends, and the pings' CDFs, in one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    one = results["one_at_a_time"]
    for kind, label in (("neutron", "Neutron port"), ("libvirt", "libvirt NAT network")):
        left.plot(range(1, len(one[kind]) + 1), [r["ready"] for r in one[kind]], "o-",
                  label=f"{label}: ready")
        left.plot(range(1, len(one[kind]) + 1), [r["built"] for r in one[kind]], "x--",
                  label=f"{label}: build returned")
    left.set_xlabel("round (one guest at a time, hv1)")
    left.set_ylabel("seconds from create")
    left.set_ylim(bottom=0)
    left.legend(fontsize=7)
    d = results["datapath"]
    for key, label in (("guest_to_guest", "guest -> guest"), ("probe_to_guest",
                       "probe -> guest"), ("ports_ping", "OVS port -> OVS port")):
        samples = sorted((d.get(key) or {}).get("samples_ms") or [])
        if samples:
            right.plot(samples, [(i + 1) / len(samples) for i in range(len(samples))],
                       label=label)
    right.set_xscale("log")
    right.set_xlabel("ping RTT hv1 -> hv2 over Geneve, ms (netdev datapath)")
    right.set_ylabel("fraction of pings")
    right.legend(fontsize=7)
    fig.suptitle(f"bench/network.py at {results['commit']} ({results['date']})", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 rounds, 6 at once")
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--at-once", type=int)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--plot-only", type=Path, metavar="JSON",
                        help="only the plot of a results file (beside it, .png)")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.plot_only.read_text()), args.plot_only.with_suffix(".png"))
        return 0
    rounds = args.rounds or (3 if args.quick else 5)
    k = args.at_once or (6 if args.quick else 20)
    available = psutil.virtual_memory().available >> 20
    if k * (GUEST_MIB + 128) > available - 4096:
        k = max(2, (available - 4096) // (GUEST_MIB + 128))
        say(f"memory: {available} MiB available, {k} at once")
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    why = netns_usable()
    if why:
        raise SystemExit(f"bench/network.py: {why}")
    image = f"file://{build_test_guest()}"
    image_dir = str(Path(image.removeprefix("file://")).parent)
    commit = checkout_commit()
    load_before = load()
    started = time.monotonic()
    ROOT.mkdir(parents=True, exist_ok=True, mode=0o711)
    run_dir = ROOT / f"network-{uuidlib.uuid4().hex[:8]}"
    run_dir.mkdir(mode=0o711)
    results: dict[str, Any] = {"settings": {"quick": args.quick, "rounds": rounds,
                                            "at_once": k, "guest_mib": GUEST_MIB}}
    try:
        with stack(run_dir) as (keystone, network, cli):
            say(f"stack up: {network.timings}")
            settings = neutron_settings(network, keystone)
            neutron = NeutronClient(settings)
            tenant = cli(DEMO, "network", "create", "tenant")
            tenant["subnet"] = cli(DEMO, "subnet", "create", "--network", tenant["id"],
                                   "--subnet-range", CIDR, "tenant-subnet")
            with OvnHypervisors.create(["hv1", "hv2"], ROOT, network.ovn,
                                       sorted({str(GUEST_CACHE), image_dir}),
                                       settings) as hosts:
                results.update(run(cli, network, hosts, tenant, neutron, image, run_dir,
                                   rounds, k, args))
            results["load_after_before_stop"] = load()
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    results.update(commit=commit, load_before=load_before, machine=machine_line(),
                   file=f"network{'-quick' if args.quick else ''}.json")
    results["summary"] = summary(results)
    save_results(RESULTS / results["file"], results, started)
    try:
        plot(results, RESULTS / results["file"].replace(".json", ".png"))
    except ImportError as exc:  # matplotlib: `make bench-deps`
        say(f"no plot: {exc}; `bench/network.py --plot-only FILE` makes it later")
    (RESULTS / results["file"].replace(".json", ".partial.json")).unlink(missing_ok=True)
    for line in markdown(results):
        print(line)
    return 0



def checkpoint(out: dict[str, Any], args: argparse.Namespace) -> None:
    """What is measured so far, in case the run is cut short (removed at the end)."""
    partial = RESULTS / f"network{'-quick' if args.quick else ''}.partial.json"
    partial.write_text(json.dumps({"load": load(), **out}, indent=1))


def run(cli: Cli, network: NetworkStack, hosts: OvnHypervisors, tenant: dict[str, Any],
        neutron: NeutronClient, image: str, run_dir: Path, rounds: int, k: int,
        args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    port, prober = probe(cli, hosts, tenant)
    hv1 = hosts["hv1"]
    workers = {name: Worker(host.config) for name, host in hosts.hosts.items()}
    nat_config = libvirt_network(hv1)
    nat = Worker(nat_config)
    processes = hv1.config["compute"]["workers"]
    try:
        until("the probe's port ACTIVE", lambda: neutron.port(port["id"])["status"] == "ACTIVE",
              timeout=120, interval=0.2)
        # A warm-up of each (image cached on the host, the workers' imports done).
        timed(workers["hv1"], hv1, spec_for(hv1, image, tenant["project_id"],
                                            networks=[{"uuid": tenant["id"]}]), neutron)
        timed(nat, hv1, spec_for(hv1, image, "p"), None)
        say("1. one at a time")
        out["one_at_a_time"] = one_at_a_time(hv1, workers["hv1"], nat, image, tenant,
                                             neutron, rounds)
        checkpoint(out, args)
        say(f"2. {k} at once")
        out["at_once"] = {}
        for kind in ("neutron", "libvirt"):
            config = hv1.config if kind == "neutron" else nat_config
            pool = Pool(config, processes)
            try:
                specs = [spec_for(hv1, image, tenant["project_id"],
                                  networks=[{"uuid": tenant["id"]}]) if kind == "neutron"
                         else spec_for(hv1, image, "p") for _ in range(k)]
                out["at_once"][kind] = at_once(hv1, pool, specs)
            finally:
                pool.close()
            say(f"{k} at once, {kind}: {out['at_once'][kind]}")
        checkpoint(out, args)
        say("3. the datapath")
        out["datapath"] = datapath(cli, hosts, workers, image, tenant, neutron, prober,
                                   run_dir, 50, 8 if args.quick else 32,
                                   64 if args.quick else 256)
        checkpoint(out, args)
        say("4. idle cost")
        named = {"OVS (ovsdb-server, ovs-vswitchd)": hosts["hv2"].chassis.switch.pids,
                 "ovn-controller": hosts["hv2"].chassis.controller.pids,
                 "libvirt network's dnsmasq (the baseline's)": dnsmasq_pids(hv1)}
        md: OvnHosts | None = None
        error = None
        try:
            md, _ = metadata_host(network, cli, tenant, run_dir, neutron)
            agent = md["md"].metadata
            assert agent is not None
            named["OVN metadata agent (agent, privsep daemons, haproxy)"] = agent.pids
        except Exception as exc:  # noqa: BLE001 (measured without it, and said so)
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        try:
            time.sleep(5)
            out["idle"] = idle(named, args.idle_seconds)
            if error:
                out["idle"]["metadata_error"] = error
        finally:
            if md is not None:
                md.close()
        for group, row in out["idle"]["groups"].items():
            say(f"idle {group}: {row['rss_mib']} MiB RSS, {row['pss_mib']} MiB PSS, "
                f"{row['cpu_percent']}% CPU")
    finally:
        for one in [*workers.values(), nat]:
            one.close()
        with contextlib.suppress(Exception):
            remove_libvirt_network(hv1)
        hv1.chassis.unplug(f"tap{port['id'][:11]}")
    out["settings_workers"] = processes
    return out


if __name__ == "__main__":
    sys.exit(main())
