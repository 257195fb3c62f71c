"""Server groups (Nova's os-server-groups): a project's named policy for where its servers
go, kept in etcd (`/server-groups/<uuid>`).

The scheduler already places by group: a request names a group and its policy, and the
group's members are `/groups/<name>/<instance>` (written with each instance, forgotten
with it). A server group here is that group with the name its uuid, plus what Nova keeps
of it: its display name, owner, policy and rules. So its members are the scheduler's own
(the live ones are shown), and the policy is the scheduler's filters and weighers:
affinity and anti-affinity are hard (no valid host rather than break them),
soft-affinity and soft-anti-affinity weighed (best effort), an anti-affinity group's
`max_server_per_host` rule is how many members a host may take.

Quotas: `server_groups` per project (counted when a group is made, and again after, as
Nova's recheck), `server_group_members` per group (counted when servers join it).
"""

from __future__ import annotations

import time
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records
from etcd_compute.keys import UUID


class TooManyGroups(Exception):
    """A project at its server_groups limit (403, Nova's message)."""


@dataclass
class ServerGroup:
    id: str
    name: str
    project_id: str
    user_id: str
    policy: str
    rules: dict[str, int] = field(default_factory=dict)
    created_at: float = 0.0

    def to_message(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "project_id": self.project_id,
                "user_id": self.user_id, "policy": self.policy, "rules": dict(self.rules),
                "created_at": self.created_at}

    @property
    def max_per_host(self) -> int | None:
        return self.rules.get("max_server_per_host")


class ServerGroups:
    def __init__(self, store: KeyValueStore):
        self.store = store
        self.keys = store.keys

    def get(self, group_id: str) -> ServerGroup | None:
        if not UUID.match(group_id):
            return None
        try:
            message, _ = self.store.read(messages.SERVER_GROUP, self.keys.server_group(group_id))
        except InvalidMessage:
            return None
        return ServerGroup(**message) if message else None

    def list(self, project_id: str | None = None) -> list[ServerGroup]:
        """Every group (of `project_id` if given), oldest first."""
        found = self.store.read_prefix(messages.SERVER_GROUP, self.keys.server_groups())
        groups = [ServerGroup(**m) for m in found.values()
                  if project_id is None or m["project_id"] == project_id]
        return sorted(groups, key=lambda g: (g.created_at, g.id))

    def create(self, name: str, project_id: str, user_id: str, policy: str,
               rules: dict[str, int], limit: int) -> ServerGroup:
        """A new group; TooManyGroups when the project has `limit` already (-1: none), also
        when another create got in meanwhile (counted again after, as Nova's recheck)."""
        if 0 <= limit <= len(self.list(project_id)):
            raise TooManyGroups("Quota exceeded, too many server groups.")
        group = ServerGroup(str(uuidlib.uuid4()), name, project_id, user_id, policy,
                            dict(rules), time.time())
        self.store.put(messages.SERVER_GROUP, self.keys.server_group(group.id),
                       group.to_message())
        if 0 <= limit < len(self.list(project_id)):
            self.store.delete(self.keys.server_group(group.id))
            raise TooManyGroups("Quota exceeded, too many server groups.")
        return group

    def delete(self, group: ServerGroup) -> None:
        """The group goes; its members stay where they are (Nova's)."""
        self.store.delete(self.keys.server_group(group.id))

    def members(self, group: ServerGroup) -> list[str]:
        """The group's live members: not ended (ERROR and DELETED are not; the scheduler
        counts them the same way)."""
        found, _ = records.group_members(self.store, group.id)
        return sorted(found)

    def member_count(self, group: ServerGroup) -> int:
        """How many members count against server_group_members: the live ones."""
        return len(self.members(group))
