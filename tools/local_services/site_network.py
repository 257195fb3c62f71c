"""`make up`'s network on the neutron backend: one process that starts, holds and (on
SIGTERM) removes the pieces the network tests start one by one, so `make up` and `make
down` (stack.py) run them as the tests do and tear them down by the same code.

    python -m tools.local_services.site_network --run-dir run [--host local]

It starts, on the Keystone of `make up` (run/services.json):

- the network service (networking.py): MariaDB, OVN's central databases and ovn-northd,
  Neutron with ML2/OVN (in Keystone's catalog as `network` while it runs);
- the hypervisor host (ovn_hypervisors.py): a network namespace that is an OVN chassis
  (its own Open vSwitch and ovn-controller), a private libvirtd there, Neutron's OVN
  metadata agent, and our metadata API in signed mode where that agent asks it
  (host_mdserver.py: in the root namespace, on the hosts' bridge's address);
- the site's uplink (outside.py): a namespace "outside" (the user's laptop) on a segment
  of its own, the host's br-ex on it as `physnet1`, the host a gateway chassis;
- the admin's flat external network `public` on that segment (`public-subnet`: the
  segment's .100-.199, no DHCP, the laptop as its router).

Then it writes `site.json` in its directory (what stack.py needs: the host's compute
settings, the outside namespace and segment) and waits. On SIGTERM (or SIGINT) it removes
all of it in reverse: `public`, the uplink, the host (its guests, agent, switch,
namespace), the network service (its databases' files). Its namespaces and bridges are
registered under its pid (netns.py): if it is killed outright, the next run sweeps them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from etcd_compute.neutron import NeutronClient
from tools.local_services import cloud
from tools.local_services.networking import NetworkStack
from tools.local_services.outside import PHYSNET, Outside
from tools.local_services.ovn_hypervisors import OvnHypervisors

PUBLIC = "public"
METADATA_PORT = 8775  # the host's metadata API, on the hosts' bridge's address (Nova's port)
SITE_FILE = "site.json"


def neutron_settings(network: NetworkStack, user: dict[str, Any]) -> dict[str, Any]:
    """A `network.neutron` section: Neutron's endpoint as `user` (a keystone section)."""
    verify = network.neutron.verify
    return {"endpoint": network.neutron.endpoint,
            "ca_cert": verify if isinstance(verify, str) else None, "timeout": 30.0,
            "keystone": user, "integration_bridge": "br-int", "vif_plugging_timeout": 120,
            "vif_plugging_is_fatal": True}


def make_public(admin: NeutronClient, outside: Outside) -> dict[str, Any]:
    """The flat external network `public` on physnet1 and its subnet on the uplink's
    segment (as the admin)."""
    network = admin.request("POST", "/networks", expect=(201,), json={"network": {
        "name": PUBLIC, "router:external": True, "provider:network_type": "flat",
        "provider:physical_network": PHYSNET}}).json()["network"]
    start, end = outside.pool
    admin.request("POST", "/subnets", expect=(201,), json={"subnet": {
        "name": f"{PUBLIC}-subnet", "network_id": network["id"], "ip_version": 4,
        "cidr": outside.cidr, "gateway_ip": outside.gateway, "enable_dhcp": False,
        "allocation_pools": [{"start": start, "end": end}]}})
    return dict(network)


def remove_public(admin: NeutronClient, network_id: str) -> None:
    """`public`, once what a user left on it is gone (floating IPs, routers' gateways)."""
    with contextlib.suppress(Exception):
        for floating in admin.floating_ips(floating_network_id=network_id):
            admin.request("DELETE", f"/floatingips/{floating['id']}", expect=(204, 404))
        for router in admin.request("GET", "/routers").json()["routers"]:
            gateway = router.get("external_gateway_info") or {}
            if gateway.get("network_id") == network_id:
                admin.request("PUT", f"/routers/{router['id']}", expect=(200,),
                              json={"router": {"external_gateway_info": {}}})
        admin.request("DELETE", f"/networks/{network_id}", expect=(204, 404))


def serve(run_dir: Path, host: str, vm_root: Path, image_dirs: list[str],
          stop: threading.Event, neutron_workers: int | None = None) -> None:
    """Start everything (timings in site.json), wait for `stop`, remove everything.
    `neutron_workers`: Neutron's API workers; None: one per core (at most 4), as Neutron's
    `api_workers` defaults: with one, every server view's port lookups wait behind whatever
    Neutron is doing."""
    from tools.local_services.stack import LocalStack

    stack = LocalStack.load(run_dir)
    keystone = stack._keystone()  # noqa: SLF001 (the stack's own Keystone, this package's)
    here = run_dir / "network"
    site_file = here / SITE_FILE
    began = time.monotonic()
    timings: dict[str, float] = {}
    with contextlib.ExitStack() as exits:
        network = NetworkStack.create(here, keystone, None if stack.plain else stack.pki,
                                      neutron_workers=neutron_workers or
                                      min(os.cpu_count() or 1, 4))
        network.start()
        exits.callback(network.stop)
        timings["network service"] = time.monotonic() - began
        service = neutron_settings(network, cloud.service_credentials(keystone))
        hosts = exits.enter_context(OvnHypervisors.create(
            [host], vm_root, network.ovn, image_dirs, service, metadata_port=METADATA_PORT))
        timings["hypervisor host"] = time.monotonic() - began - sum(timings.values())
        outside = exits.enter_context(Outside.create(hosts.chassis.hosts.values()))
        admin = NeutronClient(neutron_settings(
            network, keystone.client_section("admin", None, "admin")))
        public = make_public(admin, outside)
        exits.callback(remove_public, admin, public["id"])
        timings["outside and public"] = time.monotonic() - began - sum(timings.values())
        site = {
            "neutron": network.neutron.endpoint,
            "outside": {"netns": outside.laptop.netns, "address": outside.address,
                        "cidr": outside.cidr, "pool": list(outside.pool)},
            "public": public["id"],
            "hosts": {name: {"netns": one.chassis.space.netns, "config": one.config}
                      for name, one in hosts.hosts.items()},
            "pids": [*network.pids, *(pid for one in hosts.hosts.values() for pid in one.pids)],
            "timings": {name: round(value, 1) for name, value in timings.items()},
        }
        partial = site_file.with_suffix(".partial")
        partial.write_text(json.dumps(site, indent=2))
        partial.replace(site_file)
        while not stop.wait(1):
            pass
        site_file.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--host", default="local")
    parser.add_argument("--vm-root", required=True,
                        help="where the host's guests' files go (qemu must traverse it)")
    parser.add_argument("--image-dir", action="append", default=[],
                        help="a directory file:// images may come from")
    parser.add_argument("--neutron-workers", type=int, default=None,
                        help="Neutron's API workers (default: one per core, at most 4)")
    args = parser.parse_args(argv)
    stop = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stop.set())
    serve(Path(args.run_dir).resolve(), args.host, Path(args.vm_root), args.image_dir, stop,
          args.neutron_workers)
    return 0


if __name__ == "__main__":
    sys.exit(main())
