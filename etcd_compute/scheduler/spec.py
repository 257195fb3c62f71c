"""What is asked of the scheduler (RequestSpec) and what it answers (Destination)."""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from etcd_compute.errors import UsageError
from etcd_compute.scheduler.request import UUID, ResourceRequest, parse_query

NAME = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
GROUP_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")
# As the instance_spec schema has it: printable ASCII, at most 2048 characters.
IMAGE_URL = re.compile(r"\A(https?|file)://[!-~]{1,2030}\Z")
# Nova's server group policies: the hard ones filter, the soft ones weigh.
POLICIES = ("affinity", "anti-affinity", "soft-affinity", "soft-anti-affinity")
# What the controller does with an instance whose host died: rebuild it on another host
# from its image (its local disk is lost), or end it in ERROR and free its claim.
ON_HOST_FAILURE = ("rebuild", "error")
# Keystone's project and user ids (and our defaults), as the instance_spec schema has them.
OWNER_ID = re.compile(r"\A[A-Za-z0-9_.-]{1,255}\Z")



def operator_name() -> str:
    """Who is asking (user@host), for the instance's events and a host's maintenance."""
    return f"{getpass.getuser()}@{socket.gethostname()}"[:255]


def api_caller(user_id: str, project_id: str) -> str:
    """Who is asking through the compute API, as the instance's events name it (a Keystone
    user of a project): api:USER@PROJECT."""
    return f"api:{user_id}@{project_id}"[:255]

@dataclass
class RequestSpec:
    """One scheduling request: `count` instances of `request` (a parsed query)."""

    request: ResourceRequest
    count: int = 1
    name: str | None = None
    image_url: str | None = None
    user_data: str | None = None
    ssh_key: str | None = None
    # An image in Glance, as `scheduler/images.py` resolved it (instead of image_url).
    glance_image: dict[str, Any] | None = None
    # Server group: (name, policy), a policy of POLICIES.
    group: tuple[str, str] | None = None
    zone: str | None = None
    # None: scheduler.on_host_failure.
    on_host_failure: str | None = None
    # Whose instances these are (Placement's consumer project and user); None:
    # scheduler.project_id / user_id, the operator's.
    project_id: str | None = None
    user_id: str | None = None
    # The instances' uuids, chosen by the caller (the compute API counts a request's
    # claims by them); None: new ones.
    uuids: list[str] | None = None
    # The compute API's view of each instance (`server` message, without its uuid and
    # name), written with the instances; None: none (instances made by schedule.py).
    server: dict[str, Any] | None = None
    # An anti-affinity group's members per host at most (Nova's max_server_per_host
    # rule); None: one.
    group_max: int | None = None
    # False: the guests get no network interface (the compute API's networks none).
    network: bool = True
    # The neutron backend: the networks and ports each guest is on, as the compute API
    # checked them ({"uuid"} | {"port"} | {"uuid", "fixed_ip"}); None: auto.
    networks: list[dict[str, str]] | None = None
    # The neutron backend: the Neutron security group ids its ports are made with; None:
    # Neutron's default group of the project.
    security_groups: list[str] | None = None

    @classmethod
    def build(cls, query: str, count: int = 1, name: str | None = None,
              image_url: str | None = None, user_data: str | None = None,
              ssh_key: str | None = None, group: tuple[str, str] | None = None,
              zone: str | None = None,
              required_resources: Collection[str] = (),
              on_host_failure: str | None = None, project_id: str | None = None,
              user_id: str | None = None, uuids: list[str] | None = None,
              server: dict[str, Any] | None = None,
              group_max: int | None = None,
              glance_image: dict[str, Any] | None = None,
              network: bool = True, networks: list[dict[str, str]] | None = None,
              security_groups: list[str] | None = None) -> RequestSpec:
        """Parse and check everything locally; UsageError (one line) on any fault.

        `required_resources`: classes every instance must claim (schedule.py passes
        `scheduler.required_resources`: what the libvirt driver needs).
        """
        request = parse_query(query)
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise UsageError(f"--count {count!r}: expected 1..1000")
        if name is not None:
            longest = name if count == 1 else f"{name}-{count}"
            if not NAME.match(longest):
                raise UsageError(f"--name {name!r}: letters, digits, '_.-', at most 63 "
                                 "characters (with the -N suffix for --count)")
        if image_url is not None and not IMAGE_URL.match(image_url):
            raise UsageError(f"--image {image_url[:100]!r}: expected an http(s):// or file:// "
                             "URL of printable ASCII, at most 2048 characters")
        if image_url is not None and glance_image is not None:
            raise UsageError("--image: a URL or an image in Glance, not both")
        if group is not None:
            group_name, policy = group
            if policy not in POLICIES:
                raise UsageError(f"--hint {policy}: expected " + ", ".join(POLICIES))
            if not GROUP_NAME.match(group_name):
                raise UsageError(f"--hint {policy}={group_name!r}: group names are 1-64 of "
                                 "letters, digits, '_.-'")
        if group_max is not None and (group is None or group[1] != "anti-affinity" or
                                      isinstance(group_max, bool) or
                                      not isinstance(group_max, int) or
                                      not 1 <= group_max <= 1000):
            raise UsageError("max_server_per_host: 1..1000, for an anti-affinity group only")
        if zone is not None:
            if not UUID.match(zone):
                raise UsageError(f"--zone {zone!r}: expected an aggregate uuid "
                                 "(zones are Placement aggregates)")
            request.add_member_of([zone])
        if user_data is not None and len(user_data) > 65536:
            raise UsageError("--user-data: larger than 64 KiB")
        if ssh_key is not None and len(ssh_key) > 16384:
            raise UsageError("--key: larger than 16 KiB")
        missing = [rc for rc in required_resources if rc not in request.resources]
        if missing:
            raise UsageError(f"resources: {', '.join(missing)} missing; every instance claims "
                             f"{', '.join(required_resources)} (scheduler.required_resources)")
        if on_host_failure is not None and on_host_failure not in ON_HOST_FAILURE:
            raise UsageError(f"--on-host-failure {on_host_failure!r}: expected "
                             f"{' or '.join(ON_HOST_FAILURE)}")
        for what, value in (("project", project_id), ("user", user_id)):
            if value is not None and not OWNER_ID.match(value):
                raise UsageError(f"{what} id {value[:100]!r}: letters, digits, '_.-', at most "
                                 "255 characters")
        if uuids is not None and (len(uuids) != count or len(set(uuids)) != count or
                                  not all(isinstance(u, str) and UUID.match(u) for u in uuids)):
            raise UsageError(f"instance uuids: expected {count} distinct uuids")
        if server is not None and not isinstance(server, dict):
            raise UsageError("server: expected an object")
        if not isinstance(network, bool):
            raise UsageError("network: expected true or false")
        _check_networks(networks, security_groups)
        return cls(request, count, name, image_url, user_data, ssh_key, glance_image, group,
                   zone, on_host_failure, project_id, user_id, uuids, server, group_max,
                   network, networks, security_groups)

    def group_message(self) -> dict[str, Any] | None:
        """The group as specs and queued requests carry it."""
        if self.group is None:
            return None
        return {"name": self.group[0], "policy": self.group[1],
                **({"max_per_host": self.group_max} if self.group_max else {})}

    def owner(self, settings: dict[str, Any]) -> tuple[str, str]:
        """(project, user) the instances belong to: the request's, else the configured."""
        return (self.project_id or settings["project_id"], self.user_id or settings["user_id"])

    def requester(self) -> str:
        """Who asks, for the instances' events: the compute API's caller (`api_caller`),
        else this process's operator."""
        if self.project_id and self.user_id:
            return api_caller(self.user_id, self.project_id)
        return operator_name()

    def image(self, default_url: str) -> dict[str, Any]:
        """The spec's `image`: the Glance image, the URL, or `default_url`."""
        if self.glance_image is not None:
            from etcd_compute.scheduler.images import spec_image

            return spec_image(self.glance_image)
        return {"url": self.image_url or default_url, "sha256": None}

    def instance_name(self, index: int, uuid: str) -> str:
        if self.name is None:
            return f"instance-{uuid[:8]}"
        return self.name if self.count == 1 else f"{self.name}-{index + 1}"


def _check_networks(networks: Any, security_groups: Any) -> None:
    """The shapes the instance spec takes (its schema checks them again when written)."""
    if networks is not None and not (
            isinstance(networks, list) and len(networks) <= 16 and all(
                isinstance(item, dict) and item
                and set(item) <= {"uuid", "port", "fixed_ip", "caller_sees"}
                and all(isinstance(v, bool) if k == "caller_sees" else isinstance(v, str)
                        for k, v in item.items()) for item in networks)):
        raise UsageError("networks: expected at most 16 of {uuid}, {port} or "
                         "{uuid, fixed_ip} (and caller_sees: true or false)")
    if security_groups is not None and not (
            isinstance(security_groups, list) and len(security_groups) <= 16 and
            all(isinstance(g, str) and UUID.match(g) for g in security_groups)):
        raise UsageError("security_groups: expected at most 16 security group ids")


def for_instance(spec: dict[str, Any], destination: str | None = None) -> RequestSpec:
    """The request an existing instance (its spec) would be placed by again: its own query
    (or its resources), its server group, its image in Glance (the ImagePropertiesFilter).

    Not the host its create named (the unnumbered `in_tree`: the compute API's 2.74 `host`
    or `zone:host`, schedule.py's `in_tree=RP`): that was the create's alone, as Nova
    persists no requested_destination and resets forced hosts before a move; kept, it
    left Placement nothing to offer but the host being left. `destination`: the one host
    a move names, asked of Placement by its tree as Nova asks of a requested destination."""
    group = spec.get("group")
    request_spec = RequestSpec.build(
        spec.get("query") or "resources=" + ",".join(
            f"{rc}:{n}" for rc, n in sorted(spec["resources"].items())),
        group=(group["name"], group["policy"]) if group else None,
        group_max=(group or {}).get("max_per_host"),
        glance_image=(spec.get("image") or {}).get("glance"))
    request_spec.request.set_destination(destination)
    return request_spec


@dataclass
class Destination:
    """Where one instance went: its host, the claim, and the alternates kept in its spec."""

    uuid: str
    name: str
    host: str
    host_name: str
    allocations: dict[str, Any]
    alternates: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "name": self.name, "host": self.host,
                "host_name": self.host_name, "allocations": self.allocations,
                "alternates": self.alternates}


def server_view(template: dict[str, Any], destination: Destination, index: int, count: int,
                now: float) -> dict[str, Any]:
    """The compute API's `server` message for one instance of a request: its template (what
    the API was asked) with the instance's uuid, hostname and display name (NAME-<n> when
    several are made, as Nova names them)."""
    name = template["name"] if count == 1 else f"{template['name']}-{index + 1}"[:255]
    return {**template, "uuid": destination.uuid, "name": name,
            "hostname": destination.name.lower(), "launch_index": index,
            "created_at": template.get("created_at", now), "updated_at": now}
