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
POLICIES = ("affinity", "anti-affinity")
# What the controller does with an instance whose host died: rebuild it on another host
# from its image (its local disk is lost), or end it in ERROR and free its claim.
ON_HOST_FAILURE = ("rebuild", "error")



def operator_name() -> str:
    """Who is asking (user@host), for the instance's events and a host's maintenance."""
    return f"{getpass.getuser()}@{socket.gethostname()}"[:255]

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
    # Server group: (name, policy) with policy "affinity" or "anti-affinity".
    group: tuple[str, str] | None = None
    zone: str | None = None
    # None: scheduler.on_host_failure.
    on_host_failure: str | None = None

    @classmethod
    def build(cls, query: str, count: int = 1, name: str | None = None,
              image_url: str | None = None, user_data: str | None = None,
              ssh_key: str | None = None, group: tuple[str, str] | None = None,
              zone: str | None = None,
              required_resources: Collection[str] = (),
              on_host_failure: str | None = None,
              glance_image: dict[str, Any] | None = None) -> RequestSpec:
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
                raise UsageError(f"--hint {policy}: expected affinity or anti-affinity")
            if not GROUP_NAME.match(group_name):
                raise UsageError(f"--hint {policy}={group_name!r}: group names are 1-64 of "
                                 "letters, digits, '_.-'")
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
        return cls(request, count, name, image_url, user_data, ssh_key, glance_image, group,
                   zone, on_host_failure)

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


def for_instance(spec: dict[str, Any]) -> RequestSpec:
    """The request an existing instance (its spec) would be placed by again: its own query
    (or its resources), its server group, its image in Glance (the ImagePropertiesFilter)."""
    group = spec.get("group")
    return RequestSpec.build(
        spec.get("query") or "resources=" + ",".join(
            f"{rc}:{n}" for rc, n in sorted(spec["resources"].items())),
        group=(group["name"], group["policy"]) if group else None,
        glance_image=(spec.get("image") or {}).get("glance"))


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
