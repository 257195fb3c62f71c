"""The cloud of Tempest's scenario tests (`make tempest SCENARIO=1`): real TCG guests Tempest
logs in to through floating IPs, from outside.

What `cloud.py` starts for the API tests (etcd, Placement, Keystone, Glance, Neutron on OVN,
the compute API, a controller), then, instead of fake hosts, the pieces the network tests
use for real guests (tools/local_services):

- two hypervisor hosts (`ovn_hypervisors.py`: each an OVN chassis in a network namespace
  with a private libvirtd, listening over TLS to each other for live moves), each with its
  compute.py (the libvirt driver, network.backend neutron);
- the site's uplink (`outside.py`): the namespace "outside" (the user's laptop) on a
  segment of its own, both hosts' br-ex on it as `physnet1`, both gateway chassis;
- the admin's flat external network `public` on that segment (`site_network.make_public`,
  as `make up` makes it): Tempest's `public_network_id`, its floating IPs;
- the offline test guest (tools/build-test-guest.sh) in Glance: `image_ref`.

Tempest runs in the outside namespace (`__main__.py`): the cloud's loopback services
answer at the namespace's own 127.0.0.1 on the same ports (`Outside.reach`), so the
catalog's endpoints and the certificates naming them hold, and the floating IPs are on
its segment.

Each host serves its guests' metadata as a Nova compute node with ML2/OVN does (Neutron's
OVN metadata agent in a mount namespace of its own, our metadata API in signed mode:
ovn_hypervisors.py), so a guest's metadata answers on either host and through a live move
(Tempest's MetadataDowntimeMeter), with `public-ipv4` (Neutron's policy lets the hosts'
service user read floating IPs) and the password a guest POSTs, shown by
os-server-password (conf.py's `metadata_service` true); a guest's key pair comes from its
config drive.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.neutron import NeutronClient
from tools.local_services import cloud as local_cloud
from tools.local_services.netns import netns_usable
from tools.local_services.outside import Outside
from tools.local_services.ovn_hypervisors import OvnHypervisor, OvnHypervisors
from tools.local_services.process import free_port
from tools.local_services.site_network import (
    METADATA_PORT,
    make_public,
    neutron_settings,
    remove_public,
)
from tools.local_services.stack import build_test_guest
from tools.tempest_run import cloud
from tools.tempest_run.conf import Cloud
from tools.tempest_run.network import TempestStack

Say = Callable[[str], None]

# The computes' names (and their chassis'): cloud.stop stops "tempest-compute-*" first.
HOSTS = ["tempest-compute-1", "tempest-compute-2"]
# The guests' files: qemu's user must traverse it (not under a 0700 home or run/).
VM_ROOT = Path("/var/tmp/etcd-compute-tempest-scenario")
# Each host's room: TCG guests of 128 and 192 MiB (m1.nano, m1.micro), a few at a time.
INVENTORY = {"VCPU": {"total": 8, "reserved": 0, "allocation_ratio": 1.0},
             "MEMORY_MB": {"total": 2048, "reserved": 0, "allocation_ratio": 1.0},
             "DISK_GB": {"total": 40, "reserved": 0, "allocation_ratio": 1.0}}
SSH_USER = "root"  # the test guest's one user (tools/build-test-guest.sh)


def start(run_dir: Path, say: Say) -> tuple[TempestStack, Cloud, Outside]:
    """Everything above started in `run_dir` (what an interrupted run left there removed
    first); the stack (to stop with cloud.stop), tempest.conf's facts and the outside."""
    why = netns_usable()
    if why:
        raise ServiceUnavailable(why)
    stack = cloud.fresh_stack(run_dir, say)
    stack.with_network = True
    try:
        image_file = build_test_guest(say)
        if image_file is None:
            raise ServiceUnavailable("the test guest could not be built "
                                     "(tools/build-test-guest.sh)")
        stack.up(free_port(), free_port(), say, keystone_port=free_port(),
                 glance_port=free_port(), api_port=free_port(), guests=False,
                 console_port=free_port())
        assert stack.network is not None
        keystone = stack._keystone()  # noqa: SLF001 (the stack's own Keystone)
        site = stack.site_exits = contextlib.ExitStack()
        hosts = site.enter_context(OvnHypervisors.create(
            HOSTS, VM_ROOT, stack.network.ovn, [str(image_file.parent)],
            neutron_settings(stack.network, local_cloud.service_credentials(keystone)),
            migration=True, metadata_port=METADATA_PORT))
        for name, host in hosts.hosts.items():
            for pid in host.daemon_pids:  # each must live as long as the cloud
                stack.remember_daemon(f"host-{name}", pid, str(hosts.root))
            say(f"hypervisor host {name}: namespace {host.chassis.space.netns} "
                f"({host.chassis.address}), OVN chassis, libvirtd {host.libvirtd.uri}, "
                f"metadata agent and API")
        outside = site.enter_context(Outside.create(hosts.chassis.hosts.values()))
        admin = NeutronClient(neutron_settings(
            stack.network, keystone.client_section("admin", None, "admin")))
        public = make_public(admin, outside)
        site.callback(remove_public, admin, public["id"])
        say(f"external network public ({public['id']}): {outside.cidr}, the laptop "
            f"{outside.address} in namespace {outside.laptop.netns}")
        cloud._start_controller(stack, say)  # noqa: SLF001 (this package's)
        providers = [_start_compute(stack, host, say) for host in hosts.hosts.values()]
        cloud._wait_alive(stack, providers)  # noqa: SLF001
        from etcd_compute.glance import GlanceClient

        image, _ = local_cloud.upload_test_guest(GlanceClient(stack.glance_config()),
                                                 image_file)
        say(f"image {image['name']} ({image['id']}, {image['disk_format']}, public)")
        outside.reach(service_ports(stack))
        low, high = cloud.api_microversions(stack)
        from tools.tempest_run.network import neutron_extensions

        extensions = neutron_extensions(stack.network, keystone)
    except BaseException:
        cloud.stop(stack, say)
        raise
    return stack, Cloud(
        auth_url=keystone.auth_url, ca_file=keystone.ca_file,
        admin_password=keystone.admin_password, image_ref=image["id"],
        image_ref_alt=image["id"], flavor_ref=cloud.FLAVOR_REF,
        flavor_ref_alt=cloud.FLAVOR_REF_ALT, min_microversion=low, max_microversion=high,
        compute_nodes=len(HOSTS), neutron=True, network_extensions=tuple(extensions),
        scenario=True, public_network_id=public["id"], ssh_user=SSH_USER,
        hosts=tuple(HOSTS)), outside


def service_ports(stack: TempestStack) -> list[int]:
    """The loopback ports of the catalog's services (Keystone, the compute API, Neutron,
    Glance) and Placement's."""
    assert stack.network is not None and stack.compute_api and stack.placement
    urls = [stack._keystone().auth_url, stack.network.neutron.endpoint,  # noqa: SLF001
            stack._glance().endpoint]  # noqa: SLF001
    return sorted({*(int(urlsplit(url).port or 0) for url in urls),
                   int(stack.compute_api["port"]), int(stack.placement["port"])} - {0})


def _start_compute(stack: TempestStack, host: OvnHypervisor, say: Say) -> str:
    """compute.py for `host` (its certificate and etcd role, its libvirtd, Neutron ports,
    Glance images); its provider's uuid."""
    rp_uuid = str(uuidlib.uuid4())
    config: dict[str, Any] = {
        **stack.host_config(rp_uuid),
        "compute": {"uuid": rp_uuid, "name": host.name,
                    "state_dir": host.config["compute"]["state_dir"],
                    "instances_dir": host.config["compute"]["instances_dir"],
                    "inventory": INVENTORY, "job_timeout_seconds": 300,
                    "shutdown_timeout_seconds": 5},
        "driver": host.config["driver"], "network": host.config["network"],
        "glance": stack.glance_config()}
    path = stack.run_dir / f"{host.name}.yaml"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    stack.remember_provider(rp_uuid)
    pid = cloud._daemon(stack, host.name, [str(cloud.REPO / "compute.py"),  # noqa: SLF001
                                           "--config", str(path)])
    say(f"compute {host.name} started (libvirt, TCG guests, pid {pid}, provider {rp_uuid})")
    return rp_uuid
