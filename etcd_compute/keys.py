"""The etcd key layout, in one place.

    /hosts/<rp_uuid>/<instance_uuid>   instance_spec: what the host must do
    /instances/<instance_uuid>         instance_record: state, host, ip, error
    /booted/<instance_uuid>            the guest IP (kept from the original toy)
    /alive/<rp_uuid>                   heartbeat, bound to the host's lease
    /stats/<rp_uuid>                   host_stats: recent build failures ...
    /groups/<name>/<instance_uuid>     server group membership
    /console/<instance_uuid>           tail of the serial log

Everything sits under a configurable prefix so several deployments (or tests)
can share one etcd.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An instance or resource provider uuid as we write them: lower case, canonical form.
UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


@dataclass(frozen=True)
class Keys:
    prefix: str = ""

    def hosts(self) -> str:
        return f"{self.prefix}/hosts/"

    def host(self, rp_uuid: str) -> str:
        return f"{self.prefix}/hosts/{rp_uuid}/"

    def host_instance(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.prefix}/hosts/{rp_uuid}/{instance_uuid}"

    def instances(self) -> str:
        return f"{self.prefix}/instances/"

    def instance(self, instance_uuid: str) -> str:
        return f"{self.prefix}/instances/{instance_uuid}"

    def booted(self, instance_uuid: str) -> str:
        return f"{self.prefix}/booted/{instance_uuid}"

    def alive_prefix(self) -> str:
        return f"{self.prefix}/alive/"

    def alive(self, rp_uuid: str) -> str:
        return f"{self.prefix}/alive/{rp_uuid}"

    def stats_prefix(self) -> str:
        return f"{self.prefix}/stats/"

    def stats(self, rp_uuid: str) -> str:
        return f"{self.prefix}/stats/{rp_uuid}"

    def group(self, name: str) -> str:
        return f"{self.prefix}/groups/{name}/"

    def group_member(self, name: str, instance_uuid: str) -> str:
        return f"{self.prefix}/groups/{name}/{instance_uuid}"

    def console(self, instance_uuid: str) -> str:
        return f"{self.prefix}/console/{instance_uuid}"

    def parse_host_instance(self, key: str) -> tuple[str, str] | None:
        """(rp_uuid, instance_uuid) from a /hosts/ key, or None if it is not one."""
        rest = key[len(self.hosts()) :] if key.startswith(self.hosts()) else None
        if rest is None or rest.count("/") != 1:
            return None
        rp_uuid, instance_uuid = rest.split("/")
        return rp_uuid, instance_uuid
