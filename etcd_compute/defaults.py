"""The settings' defaults: what each section of compute.yaml and schedule.yaml is when the
file leaves it out (config.py merges the files over these, key by key, and validates the
result against the sections' schemas, whose descriptions say what each key means).
"""

from __future__ import annotations

from typing import Any

from etcd_compute.heartbeat_timing import ELECTION_SECONDS, ETCD_TIMEOUT

ETCD_DEFAULTS: dict[str, Any] = {
    # host:port pairs; more than one means an etcd cluster.
    "endpoints": ["127.0.0.1:2379"],
    # Every key we write lives under this prefix ("" in production, unique per test).
    "prefix": "",
    "timeout": ETCD_TIMEOUT,
    # How long a leader election of the etcd cluster may take: each member waits between the
    # members' --election-timeout (1 s by default) and twice it before it stands, and a
    # round can fail (two stood at once): up to about 4 s with the default (measured here:
    # 3.7 s, on a busy machine, an election of two rounds). 0 for a single member (no
    # elections). Lease renewals (the compute's heartbeat) are timed to outlast one.
    "election_seconds": ELECTION_SECONDS,
    # TLS: the cluster CA, and this client's certificate and key (its CN is its etcd user).
    # Relative paths are relative to the configuration file.
    "ca_cert": None,
    "cert": None,
    "key": None,
    # Password authentication instead of (or with) a certificate; etcd's simple tokens are
    # per member, so a client re-authenticates when another member does not know its token.
    "user": None,
    "password": None,
}

PLACEMENT_DEFAULTS: dict[str, Any] = {
    "endpoint": "http://127.0.0.1:8080",
    # noauth2 token (Placement behind mutual TLS: the certificate is the credential).
    "token": "admin",
    "timeout": 30.0,
    # TLS, as for etcd: an https endpoint verified with ca_cert; cert/key authenticate us.
    "ca_cert": None,
    "cert": None,
    "key": None,
    # Sites with Keystone: authenticate with keystoneauth1 instead of the token
    # (auth_url plus username/password/project, or an application credential).
    "keystone": None,
}

GLANCE_DEFAULTS: dict[str, Any] = {
    # Glance's URL; null: the `image` service in Keystone's catalog.
    "endpoint": None,
    # The CA that verifies Glance (and Keystone) over https; relative to the config file.
    "ca_cert": None,
    "timeout": 30.0,
    # The service credential (keystoneauth1: auth_url plus username/password/project, or an
    # application credential); null: no Glance, images are URLs only.
    "keystone": None,
}

# The guests' network (network_backend.py): each host's libvirt NAT network, or Neutron.
NETWORK_DEFAULTS: dict[str, Any] = {
    "backend": "libvirt",
    "neutron": {
        # Neutron's URL; null: the `network` service in Keystone's catalog.
        "endpoint": None, "ca_cert": None, "timeout": 30.0,
        # The service credential (as glance.keystone); null: no Neutron.
        "keystone": None,
        "integration_bridge": "br-int",
        # Nova's options of these names: how long a build waits for network-vif-plugged,
        # and whether a port not up by then fails it.
        "vif_plugging_timeout": 300, "vif_plugging_is_fatal": True,
    },
}

LOGGING_DEFAULTS: dict[str, Any] = {"level": "INFO"}

# A DELETED record's life, after which etcd drops it and every key of the instance goes
# with it (the hosts write it; the operator's side when it finishes a destroy itself).
DELETED_RECORD_TTL = 3600

COMPUTE_DEFAULTS: dict[str, Any] = {
    "etcd": ETCD_DEFAULTS,
    # The console relay (compute/console_relay.py): the console proxy's mutual-TLS way to
    # this host's guests' VNC. Off unless `listen` is set.
    "console": {"listen": None, "cert": None, "key": None, "ca_cert": None},
    "placement": PLACEMENT_DEFAULTS,
    "glance": GLANCE_DEFAULTS,
    "network": NETWORK_DEFAULTS,
    "logging": LOGGING_DEFAULTS,
    "compute": {
        # Resource provider uuid; generated once and kept in state_dir when null.
        "uuid": None,
        # Resource provider name; the host name when null.
        "name": None,
        "state_dir": "/var/lib/etcd-compute",
        # Where instance disks live; DISK_GB is measured on its filesystem.
        "instances_dir": "/var/lib/etcd-compute/instances",
        "heartbeat_ttl": 10,
        # Self-fencing: when the heartbeat lease has not been renewed for
        # heartbeat_ttl - fence_margin_seconds, every guest here is powered off, before the
        # lease can expire and the controller recover them on another host.
        "fence_margin_seconds": 3,
        "inventory_refresh_seconds": 60,
        "workers": 4,
        "job_timeout_seconds": 900,
        "shutdown_timeout_seconds": 30,
        # How long the DELETED status record stays readable before etcd drops it.
        "deleted_record_ttl": DELETED_RECORD_TTL,
        "traits": [],
        "aggregates": [],
        # Prometheus metrics on HOST:PORT (an IP address); null: off. See metrics.py for
        # what is refused (the wildcard, unless allowed; the guests' networks, always).
        "metrics_listen": None,
        "metrics_allow_any_address": False,
        "inventory": {
            "VCPU": {"reserved": 0, "allocation_ratio": 4.0},
            # Keep memory for the host itself and libvirt/qemu overhead.
            "MEMORY_MB": {"reserved": 1024, "allocation_ratio": 1.0},
            # The image cache's room is not for instance disks: taken off the measured
            # total (null: driver.libvirt.image_cache_max_gb with the libvirt driver).
            "DISK_GB": {"reserved": 1, "allocation_ratio": 1.0, "image_cache_gb": None},
        },
    },
    "driver": {
        "name": "libvirt",
        "libvirt": {
            "uri": "qemu:///system",
            # kvm, qemu (TCG) or auto (kvm when /dev/kvm is usable).
            "domain_type": "auto",
            "network": "etcd-compute",
            "network_cidr": "192.168.123.0/24",
            # An existing host bridge to attach as a second NIC.
            "bridge": None,
            "image_cache_dir": "/var/lib/etcd-compute/images",
            "image_cache_max_gb": 20,
            # Directories file:// images may come from (none: file:// URLs are refused).
            "image_file_dirs": [],
            # Largest image downloaded (bytes on the wire and after decoding), and how
            # long one download may take in all.
            "image_max_gb": 10,
            "image_download_timeout_seconds": 600,
            "default_image": (
                "https://github.com/cirros-dev/cirros/releases/download/0.6.3/"
                "cirros-0.6.3-x86_64-disk.img"
            ),
            "boot_timeout_seconds": 300,
            # stop, soft reboot, resize: how long the guest may take to power off when
            # asked (ACPI) before it is powered off hard (Nova's shutdown_timeout).
            "shutdown_timeout_seconds": 60,
            "mdserver_config": "mdserver.conf",
            # The guest filter drops a guest's connections to the metadata server past
            # this many; mdserver.conf's connections_per_guest must be the same.
            "metadata_connections_per_guest": 8,
            # Moving guests between hosts (docs/how-to/operators/moving-guests.md):
            # libvirtd listens with TLS on `address` for its peers (null: this host neither
            # sends nor takes guests), with the certificates `cluster.py pki issue-libvirt`
            # wrote to pki_dir. A live migration may pause the guest for max_downtime_ms at
            # the switch; one not complete after completion_seconds_per_gib per GiB to copy
            # (at least completion_min_seconds) is paused to finish, or cancelled
            # (on_timeout: pause | abort); at twice that it is cancelled. Its streams may
            # take bandwidth_mib_per_second (0: no limit).
            "migration": {
                "address": None,
                "pki_dir": "/etc/etcd-compute/libvirt-pki",
                "max_downtime_ms": 500,
                "completion_seconds_per_gib": 60,
                "completion_min_seconds": 60,
                "on_timeout": "pause",
                "bandwidth_mib_per_second": 0,
            },
        },
        "fake": {
            # Seconds a fake build takes (tests use it to destroy mid-build).
            "build_seconds": 0.0,
            # Every build fails: simulates a broken host (reschedule tests).
            "fail_builds": False,
            # Seconds a fake stop, start, reboot, rebuild or resize takes (tests use it to
            # send another action meanwhile), and the actions that fail.
            "action_seconds": 0.0,
            "fail_actions": [],
            # Seconds a live move's job runs on after the switch (the guest runs at the
            # destination): tests destroy it then.
            "switch_seconds": 0.0,
            # The host's OVSDB (`ovs-vsctl --db`): guests' Neutron ports plugged there as
            # OVS internal ports (drivers/fake_vifs.py); null: none plugged.
            "ovsdb": None,
        },
    },
}

API_DEFAULTS: dict[str, Any] = {
    # HOST:PORT to listen on (an IP address; loopback unless a site says otherwise).
    "listen": "127.0.0.1:8774",
    # gunicorn processes (stateless: run several) and threads in each (memory: api.threads).
    "workers": 1, "threads": 16,
    # TLS: a cluster PKI server certificate and key; null: plain HTTP (behind a proxy).
    "cert": None, "key": None,
    "public_url": None,  # the URL clients reach it at (links); null: each request's
    # keystonemiddleware's auth_token options (auth_url, auth_type, username, password,
    # project_name, ..., cafile): the service user that validates tokens. Required.
    "keystone_authtoken": None,
    # An oslo.policy file overriding Nova's default rules (YAML); null: the defaults.
    "policy_file": None,
    # Availability zones: the default one, and names for aggregate uuids (compute.aggregates).
    "default_availability_zone": "nova", "availability_zones": {},
    # Limits of a project without its own (os-quota-sets), Nova's defaults; -1: unlimited.
    "quotas": {"instances": 10, "cores": 20, "ram": 51200, "key_pairs": 100,
               "metadata_items": 128, "server_groups": 10, "server_group_members": 10},
    # How long a create's quota reservation may last (an API that died leaves it this long).
    "quota_reservation_seconds": 900,
    # Most items a list returns (Nova's [api] max_limit); the network addresses are under.
    "max_limit": 1000, "network_name": "etcd-compute",
    # Image URLs users may boot (an imageRef starts with one); empty: Glance images only.
    "image_url_prefixes": [],
}

SCHEDULE_DEFAULTS: dict[str, Any] = {
    "etcd": ETCD_DEFAULTS,
    # Remote consoles (remote_consoles.py, console_proxy.py): tokens live 600 s as Nova's
    # [consoleauth] token_ttl; the proxy serves noVNC from Debian's novnc package.
    "console": {
        "token_ttl_seconds": 600,
        "base_url": "http://127.0.0.1:6080/vnc_lite.html",
        "proxy_listen": "127.0.0.1:6080",
        "allowed_origins": [],
        "web_dir": "/usr/share/novnc",
        "web_cert": None, "web_key": None,
        "cert": None, "key": None, "ca_cert": None,
    },
    "placement": PLACEMENT_DEFAULTS,
    "glance": GLANCE_DEFAULTS,
    "network": NETWORK_DEFAULTS,
    "logging": {"level": "WARNING"},
    "scheduler": {
        # Real ids for claims (Placement groups usage by them), not random per call.
        "project_id": "00000000-0000-0000-0000-000000000001",
        "user_id": "00000000-0000-0000-0000-000000000001",
        "consumer_type": "INSTANCE",
        # Candidates asked of Placement per request (Placement randomizes them).
        "candidate_limit": 100,
        # Above this many live hosts, ask Placement about a few random shards of them
        # (etcd_compute/shards.py: about candidate_limit hosts), then about all if that
        # found no room; 0: always all. Every compute joins its shard at registration.
        "shard_above_hosts": 500,
        # Plan a plain `resources=` query on the hosts' own accounts of their capacity
        # (one etcd read; scheduler/hostview.py) and let the claim be Placement's check,
        # instead of asking Placement for candidates; false: always ask.
        "host_view": True,
        "host_subset_size": 3,
        "max_attempts": 3,
        "claim_retries": 5,
        "default_image": (
            "https://github.com/cirros-dev/cirros/releases/download/0.6.3/"
            "cirros-0.6.3-x86_64-disk.img"
        ),
        "filters": [
            "AliveFilter",
            "DisabledFilter",
            "AffinityFilter",
            "AntiAffinityFilter",
            "MaxInstancesPerHostFilter",
            "ImagePropertiesFilter",
        ],
        "max_instances_per_host": 50,
        # Classes every instance must claim: what the libvirt driver builds a guest
        # from. A request without one is refused before any claim (exit status 2).
        "required_resources": ["VCPU", "MEMORY_MB", "DISK_GB"],
        "weighers": {
            "RAMWeigher": 1.0,
            "CPUWeigher": 1.0,
            "DiskWeigher": 0.0,
            # Strong: one recent failure outweighs free-capacity differences.
            "BuildFailureWeigher": 10.0,
            "SoftAffinityWeigher": 1.0,
        },
        "wait_timeout_seconds": 600,
        # schedule.py serve: the leader's lease; a standby takes over this long after the
        # leader dies (at most).
        "controller_lease_ttl": 10,
        # An instance whose host died: "rebuild" it elsewhere from its image (its local disk
        # is lost) or end it in "error" (claim freed). Per instance: --on-host-failure.
        "on_host_failure": "rebuild",
        # How long after a host's heartbeat lease expired the controller acts on its
        # instances. The host itself powers its guests off before its lease can expire
        # (compute.fence_margin_seconds); this is extra margin on top.
        "host_failure_grace_seconds": 10,
        # Fence a dead host before recovering its instances (docs/how-to/operators/
        # host-failure.md): through its libvirtd over TLS, with the controller's libvirt
        # client certificates in libvirt_pki_dir (`cluster.py pki issue-libvirt NAME
        # --client-only`; null: not this way), or else with a fence agent's argv ({host},
        # {name}, {address} replaced; exit 0 means the host is off). A host fenced is
        # recovered at once; one not fenced after TTL + grace, as without fencing.
        "fencing": {
            "libvirt_pki_dir": None,
            "libvirt_timeout_seconds": 10,
            "command": None,
            "command_timeout_seconds": 60,
        },
        # How long the DELETED record of an instance destroyed from here (its host down)
        # stays readable: as the hosts' compute.deleted_record_ttl.
        "deleted_record_ttl": DELETED_RECORD_TTL,
        # etcd's --max-txn-ops (default 128): one request's specs, records and group
        # members go in one transaction, which bounds --count (42, or 32 with a group).
        "etcd_max_txn_ops": 128,
        # etcd's --max-request-bytes: one request's specs are written in one transaction.
        "etcd_max_request_bytes": 1572864,
        # `schedule.py serve` runs the scheduler service (the request queue, batched), and
        # schedule.py sends its requests there whenever a service is running.
        "service": True,
        "use_service": True,
        # How long the service keeps an answer nobody collected (schedule.py killed).
        "service_answer_ttl": 3600,
        # Seconds the service reuses an allocation-candidates answer (minus what it claimed
        # since) before asking Placement again; 0: ask for every pass.
        "service_candidates_max_age": 2.0,
        # `schedule.py serve`: Prometheus metrics on HOST:PORT (an IP address); null: off.
        "metrics_listen": None,
        "metrics_allow_any_address": False,
    },
    # The compute API (`schedule.py api`; etcd_compute/api/): Nova's v2.1 API for the
    # OpenStack clients, behind Keystone. It holds the operator's etcd and Placement
    # credentials (the sections above); its users hold Keystone tokens.
    "api": API_DEFAULTS,
    # Child zones (schedule.py zone ...; etcd_compute/zones/).
    "zones": {
        # This zone's name, as `zone info` shows it and `--zone NAME` routes to (its own
        # hosts only).
        "name": "local",
        # Where the credential files of grandchildren (zones that children list) may be;
        # a child's record naming a file elsewhere makes that zone unreachable from here.
        "credential_dirs": [],
        # A request across zones cut short (the scheduler was killed) is finished or
        # undone by the next request at this zone once its intent is this old.
        "intent_grace_seconds": 300,
    },
}
