"""The tempest.conf of our cloud: where it is, who the admin is, and what it has.

Every feature flag says what the compute API does (docs/reference/compute-api.md): Tempest then
skips, with its own reason, the tests of what we do not have, and runs all the others.
There is no skip list of ours. A flag is set here only when we truly lack the feature
(or truly have one Tempest assumes absent); each says why.
"""

from __future__ import annotations

import configparser
import io
from dataclasses import dataclass
from pathlib import Path

# [compute-feature-enabled]: what the compute API does and does not do.
COMPUTE_FEATURES: dict[str, tuple[bool, str]] = {
    "console_output": (True, "os-getConsoleOutput: the tail the host publishes"),
    "resize": (True, "resize on the same host, VERIFY_RESIZE, confirm and revert"),
    "snapshot": (True, "createImage into Glance"),
    "config_drive": (True, "every guest gets its config drive"),
    "metadata_service": (True, "the metadata server (only read with run_validation)"),
    "disk_config": (False, "OS-DCF:diskConfig is MANUAL: our disks are never repartitioned"),
    "change_password": (False, "no admin password is set in a guest"),
    "enable_instance_password": (False, "no admin password is set, so none is returned"),
    "pause": (True, "pause and unpause: libvirt's suspend of the domain, its memory in RAM "
                    "(PAUSED)"),
    "suspend": (True, "suspend and resume: libvirt's managed save (SUSPENDED)"),
    "shelve": (False, "no shelve action"),
    "shelve_migrate": (False, "no shelve action"),
    "rescue": (False, "no rescue action"),
    "stable_rescue": (False, "no rescue action"),
    "cold_migration": (True, "migrate (admins): a cold move that waits in VERIFY_RESIZE "
                             "for confirmResize or revertResize, as Nova's"),
    "live_migration": (True, "os-migrateLive (admins): schedule.py migrate --live"),
    "live_migrate_back_and_forth": (True, "a guest moves back as it moved there"),
    # Our disks are local: every live migration copies them (block_migration false is 400).
    "block_migration_for_live_migration": (True, "every live migration copies the disks"),
    "volume_backed_live_migration": (False, "no volume service"),
    "vtpm_live_migration": (False, "no vTPM"),
    # The console proxy runs, but the fake hosts have no screen behind it, and Tempest's
    # noVNC tests read the RFB handshake (real guests' consoles in a browser:
    # tests/virt/test_remote_console_vm.py).
    "vnc_console": (False, "the fake hosts have no screen behind the console proxy"),
    "spice_console": (False, "no remote consoles"),
    "serial_console": (False, "no remote consoles"),
    # os-interface attaches and detaches through the server's host; this cloud's fake hosts
    # cannot plug a port into a guest (the attach would end in 500), the scenario cloud's
    # libvirt hosts can (SCENARIO_COMPUTE_FEATURES).
    "interface_attach": (False, "the fake hosts cannot plug a port into a guest"),
    "personality": (False, "personality files are refused (user_data instead)"),
    "attach_encrypted_volume": (False, "no volume service"),
    "swap_volume": (False, "no volume service"),
    "volume_multiattach": (False, "no volume service"),
    "ide_bus": (False, "nothing is attached to a guest after it is built"),
    "unified_limits": (False, "limits are ours, in etcd (os-quota-sets), not Keystone's"),
}

# What differs on the Neutron cloud (cloud.neutron): a move does not rebind the guest's
# ports to the destination yet (Nova's port bindings), so the destination refuses it
# (docs/explanation/networking.md, "Not yet").
NEUTRON_COMPUTE_FEATURES: dict[str, tuple[bool, str]] = {
    "live_migration": (False, "on Neutron ports a move is refused: ports are not rebound"),
    "live_migrate_back_and_forth": (False, "no live migration on Neutron ports"),
    "block_migration_for_live_migration": (False, "no live migration on Neutron ports"),
}

# Nova's names of the scheduler filters we have (etcd_compute/scheduler/filters.py):
# alive and enabled hosts, image properties, hard affinity and anti-affinity. Tempest
# sends only the hints of the filters named here.
SCHEDULER_FILTERS = ["ComputeFilter", "ImagePropertiesFilter", "ServerGroupAntiAffinityFilter",
                     "ServerGroupAffinityFilter"]

# [service_available]: the services of this cloud (neutron: when cloud.py started it).
SERVICES = {"nova": True, "glance": True, "neutron": True, "cinder": False,
            "swift": False, "horizon": False}

# [network-feature-enabled] (with Neutron): what our Neutron (ML2/OVN, the router plugin,
# no external network) does; each with its reason. api_extensions are the aliases Neutron's
# own /v2.0/extensions lists (cloud.py asks it), not Tempest's default "all".
NETWORK_FEATURES: dict[str, tuple[bool, str]] = {
    "ipv6": (True, "IPv6 subnets (OVN answers router advertisements and DHCPv6)"),
    "ipv6_subnet_attributes": (True, "ipv6_ra_mode and ipv6_address_mode are served"),
    "port_admin_state_change": (True, "a port's admin_state_up can be changed"),
    "port_security": (True, "the port_security extension (ML2's port_security driver)"),
    # No external (public) network: a floating IP needs one.
    "floating_ips": (False, "no public network: no floating IPs"),
}


@dataclass(frozen=True)
class Cloud:
    """What tempest.conf needs to know of the cloud under test."""

    auth_url: str  # Keystone's v3 URL
    ca_file: str | None  # the CA of every service's certificate (None: plain HTTP)
    admin_password: str  # Keystone's bootstrap admin (project admin, domain Default)
    image_ref: str
    image_ref_alt: str
    flavor_ref: str
    flavor_ref_alt: str  # larger than flavor_ref (the resize tests grow a server to it)
    min_microversion: str  # as the API's versions document says
    max_microversion: str
    compute_nodes: int = 1
    region: str = "RegionOne"
    neutron: bool = False  # the network service runs (Neutron on OVN)
    network_extensions: tuple[str, ...] = ()  # the aliases Neutron serves
    # The scenario run's (scenario.py): real guests reached through `public`'s floating IPs.
    scenario: bool = False
    public_network_id: str = ""
    ssh_user: str = "root"
    hosts: tuple[str, ...] = ()  # the compute hosts' names (a move's source, destination)


def tempest_conf(cloud: Cloud, workspace: Path, build_timeout: int = 120) -> str:
    """tempest.conf's text for `cloud`, logs and locks under `workspace`."""
    conf = configparser.ConfigParser(interpolation=None)
    conf.optionxform = str  # type: ignore[assignment,method-assign]
    conf["DEFAULT"] = {"log_dir": str(workspace / "logs"), "log_file": "tempest.log",
                       "use_stderr": "false"}
    conf["oslo_concurrency"] = {"lock_path": str(workspace / "tempest_lock")}
    conf["auth"] = {
        # Tempest makes a project and users of its own for each test class.
        # With Neutron, each project also gets a network, subnet and router (as devstack
        # sets it): its servers are made on its network, as Nova's are in the gate.
        "use_dynamic_credentials": "true",
        "create_isolated_networks": "true" if cloud.neutron else "false",
        "admin_username": "admin", "admin_password": cloud.admin_password,
        "admin_project_name": "admin", "admin_domain_name": "Default",
        "admin_user_domain_name": "Default", "admin_project_domain_name": "Default"}
    identity = {"uri_v3": cloud.auth_url, "auth_version": "v3", "region": cloud.region,
                "v3_endpoint_type": "public", "admin_role": "admin",
                "default_domain_id": "default"}
    if cloud.ca_file:
        identity["ca_certificates_file"] = cloud.ca_file
    conf["identity"] = identity
    conf["identity-feature-enabled"] = {"api_v2": "false", "api_v3": "true"}
    conf["compute"] = {
        "image_ref": cloud.image_ref, "image_ref_alt": cloud.image_ref_alt,
        "flavor_ref": cloud.flavor_ref, "flavor_ref_alt": cloud.flavor_ref_alt,
        "min_microversion": cloud.min_microversion,
        "max_microversion": cloud.max_microversion,
        "min_compute_nodes": str(cloud.compute_nodes), "region": cloud.region,
        "endpoint_type": "publicURL", "build_timeout": str(build_timeout),
        # No network name: without Neutron Tempest looks a named network up through
        # os-networks, which Nova (and this API) removed at 2.36, so a name fails every
        # create from 2.36. Without one Tempest sends no networks before 2.37 (auto: the
        # hosts' network) and networks "none" from 2.37 (a server without an interface),
        # as it does against any Nova whose network it cannot list.
        "fixed_network_name": "",
        "build_interval": "1"}
    flags = {**COMPUTE_FEATURES, **(NEUTRON_COMPUTE_FEATURES if cloud.neutron else {}),
             **(SCENARIO_COMPUTE_FEATURES if cloud.scenario else {})}
    features = {name: "true" if on else "false" for name, (on, _) in flags.items()}
    features["scheduler_enabled_filters"] = ",".join(SCHEDULER_FILTERS)
    features["nova_policy_roles"] = "admin,member,reader"
    conf["compute-feature-enabled"] = features
    conf["service_available"] = {name: "true" if on and (name != "neutron" or cloud.neutron)
                                 else "false" for name, on in SERVICES.items()}
    if cloud.neutron:
        network_sections(conf, cloud, build_timeout)
    conf["image"] = {"region": cloud.region, "endpoint_type": "public",
                     "build_timeout": str(build_timeout)}
    conf["image-feature-enabled"] = {"api_v2": "true"}
    if cloud.scenario:
        scenario_sections(conf, cloud)
    else:
        # Guests are never reached over the network: a fake guest has no operating system
        # to answer ssh or ping (its port is a switch's internal port), and there is no
        # public network for the floating IPs Tempest would reach it through.
        conf["validation"] = {"run_validation": "false"}
    out = io.StringIO()
    conf.write(out)
    return out.getvalue()

# What differs on the scenario run's cloud (cloud.scenario: real TCG guests on two libvirt
# hosts, scenario.py): Tempest logs in to its guests and reads what they see.
SCENARIO_COMPUTE_FEATURES: dict[str, tuple[bool, str]] = {
    # Nova's config drive is a `config-2` filesystem with openstack/latest/meta_data.json;
    # ours is NoCloud (`cidata`: meta-data, user-data), which Tempest does not read.
    "config_drive": (False, "our config drive is NoCloud (cidata), not Nova's config-2"),
    # Each host serves its guests' metadata through Neutron's OVN metadata agent (the live
    # moves' MetadataDowntimeMeter reads meta-data/hostname through it whatever this flag
    # says), with local-ipv4 and public-ipv4 (the port's floating IP, from Neutron) and the
    # password a guest POSTs, published by its compute for os-server-password: what
    # test_server_basic_ops checks when this is on (docs/explanation/networking.md#metadata).
    "metadata_service": (True, "public-ipv4 (the floating IP) and a POSTed password shown "
                               "by os-server-password"),
    # Real libvirt hosts listening over TLS to each other: guests move live, their ports
    # rebound (docs/explanation/networking.md#moves).
    "live_migration": (True, "os-migrateLive between the two hosts, ports rebound"),
    "live_migrate_back_and_forth": (True, "a guest moves back as it moved there"),
    "block_migration_for_live_migration": (True, "every live migration copies the disks"),
    # The libvirt hosts plug a port into a running guest and unplug it
    # (tests/network/test_interface_hotplug_vm.py).
    "interface_attach": (True, "os-interface through the libvirt hosts"),
}

# The scenario run's guests: the test guest's login and DHCP client, how long a TCG boot
# may take on this shared machine.
SSH_TIMEOUT = 300


def scenario_sections(conf: configparser.ConfigParser, cloud: Cloud) -> None:
    """[validation], [scenario] and the public network for Tempest's scenario tests: the
    guests reached over SSH with their key pair through a floating IP of `public`."""
    conf["validation"] = {
        "run_validation": "true", "connect_method": "floating", "auth_method": "keypair",
        "image_ssh_user": cloud.ssh_user, "ip_version_for_ssh": "4",
        "network_for_ssh": "public",
        "ssh_timeout": str(SSH_TIMEOUT), "connect_timeout": "60",
        "ping_timeout": str(SSH_TIMEOUT)}
    # The guest's busybox udhcpc (its pid file where Tempest looks: /var/run/udhcpc.eth0.pid);
    # its root is an initramfs, its disk's FAT partition the writable /persist (the
    # timestamp test_snapshot_pattern finds again in a server of the snapshot).
    conf["scenario"] = {"dhcp_client": "udhcpc", "target_dir": "/persist"}
    # Tempest logs what the moves' tests measure (the floating IP's and the metadata's
    # downtime through a live migration) at debug only: in tempest.log.
    conf["DEFAULT"]["debug"] = "true"
    if len(cloud.hosts) >= 2:  # the moves' tests that name their hosts (from 2.74)
        conf["compute"]["migration_source_host"] = cloud.hosts[0]
        conf["compute"]["migration_dest_host"] = cloud.hosts[1]
    conf["network"]["public_network_id"] = cloud.public_network_id
    conf["network"]["floating_network_name"] = "public"
    conf["network-feature-enabled"]["floating_ips"] = "true"


# Extensions Neutron lists that this cloud cannot use, left out of api_extensions, and why.
NETWORK_EXTENSIONS_UNUSABLE = {
    "auto-allocated-topology": "Nova's get-me-a-network: no default external network for "
                               "Neutron to allocate from, and the compute API does not ask "
                               "Neutron for a topology (networks auto is the project's one "
                               "network)",
}


def network_sections(conf: configparser.ConfigParser, cloud: Cloud, build_timeout: int
                     ) -> None:
    """[network] and [network-feature-enabled]: Neutron in the catalog, no public network
    (public_network_id, floating_network_name empty), project networks unreachable from
    Tempest (nothing routes to them)."""
    conf["network"] = {"catalog_type": "network", "region": cloud.region,
                       "endpoint_type": "publicURL", "public_network_id": "",
                       "floating_network_name": "", "project_networks_reachable": "false",
                       "shared_physical_network": "false",
                       "build_timeout": str(build_timeout)}
    features = {name: "true" if on else "false" for name, (on, _) in NETWORK_FEATURES.items()}
    usable = [ext for ext in cloud.network_extensions if ext not in NETWORK_EXTENSIONS_UNUSABLE]
    features["api_extensions"] = ",".join(usable) or "all"
    conf["network-feature-enabled"] = features
