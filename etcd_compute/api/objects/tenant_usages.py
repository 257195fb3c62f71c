"""What each project's servers used over a period (Nova's os-simple-tenant-usage), from
our records: a server counts from its launch (`launched_at`) to its end (its DELETED
record's time) or the period's end, at its flavor's size, as Nova's
`_hours_for`. Servers that never launched count nothing. A deleted server counts while
its DELETED record lives (`deleted_record_ttl`): we keep no history beyond it."""

from __future__ import annotations

import time
from dataclasses import dataclass

from etcd_compute.api.objects.servers import Server, Servers
from etcd_compute.instances import states


@dataclass
class ServerUsage:
    uuid: str
    name: str
    project_id: str
    flavor: str
    vcpus: int
    memory_mb: int
    local_gb: int
    started_at: float
    ended_at: float | None
    hours: float
    # The server itself (its state is shown as Nova's vm_state; "terminated" once ended).
    server: Server

    @property
    def uptime(self) -> int:
        """Seconds it ran (until now if it still does), as Nova's."""
        return int((self.ended_at or time.time()) - self.started_at)


@dataclass
class TenantUsage:
    project_id: str
    servers: list[ServerUsage]

    def total(self, field: str) -> float:
        """hours, or the size × hours sum of `field` (vcpus, memory_mb, local_gb)."""
        if field == "hours":
            return sum(s.hours for s in self.servers)
        return sum(s.hours * getattr(s, field) for s in self.servers)


def server_usage(server: Server, start: float, stop: float) -> ServerUsage | None:
    """The server's use within [start, stop]; None if it never launched or ran outside."""
    record = server.record or {}
    launched = record.get("launched_at")
    if not launched:
        return None
    ended = float(record["updated_at"]) if server.state == states.DELETED else None
    if launched > stop or (ended is not None and ended < start):
        return None
    seconds = max(0.0, min(ended or stop, stop) - max(launched, start))
    flavor = server.doc["flavor"]
    return ServerUsage(
        server.uuid, str(server.doc["name"]), server.project_id, str(flavor["name"]),
        int(flavor["vcpus"]), int(flavor["ram"]),
        int(flavor["disk"]) + int(flavor.get("ephemeral", 0)), float(launched), ended,
        seconds / 3600, server)


def usages(servers: Servers, start: float, stop: float,
           project_id: str | None = None) -> list[TenantUsage]:
    """Each project's usage (of `project_id` only if given), its servers oldest first;
    projects in the order of their first server."""
    found: dict[str, TenantUsage] = {}
    for server in servers.list(project_id, deleted=True):
        used = server_usage(server, start, stop)
        if used is not None:
            found.setdefault(used.project_id, TenantUsage(used.project_id, [])).servers \
                .append(used)
    return list(found.values())
