"""A create request: counted against the project's quota, planned and claimed through
the scheduler (its service when one runs, else directly, as `schedule.py` does), written
with the API's view of each instance in the request's one transaction.

Nothing is half-made: a refusal before the claim (quota, a bad request) writes nothing;
a request no host can take becomes servers in ERROR with Nova's fault and no claim; the
recheck after the claim (Nova's `recheck_quota`) destroys what it made if the project
went over meanwhile (only possible when limits were lowered or a reservation expired).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from etcd_compute.api.objects.flavors import Flavor
from etcd_compute.api.objects.images import Image
from etcd_compute.api.objects.quotas import OverQuota, Quotas
from etcd_compute.api.objects.server_groups import ServerGroup, ServerGroups
from etcd_compute.api.objects.servers import Servers
from etcd_compute.errors import ConflictError, EtcdComputeError, NoValidHost
from etcd_compute.etcd import Store
from etcd_compute.instances import actions as action_txn
from etcd_compute.ops.queue_client import QueueClient
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.hostview import Cache
from etcd_compute.scheduler.scheduler import Scheduler
from etcd_compute.scheduler.spec import Destination, RequestSpec

LOG = logging.getLogger(__name__)
NO_VALID_HOST = "No valid host was found. There are not enough hosts available."


@dataclass
class Build:
    """What a create asks for, checked by the handler."""

    project_id: str
    user_id: str
    name: str
    flavor: Flavor
    image: Image
    min_count: int = 1
    max_count: int = 1
    description: str | None = None
    user_data: str | None = None
    user_data_b64: str | None = None
    key_name: str | None = None
    public_key: str | None = None
    metadata: dict[str, str] | None = None
    availability_zone: str | None = None
    # Placement query constraints besides the flavor's (zone aggregate, forced host).
    extra_query: str = ""
    access_ipv4: str | None = None
    access_ipv6: str | None = None
    tags: list[str] | None = None
    # The server group it joins, and how many members that group may have (-1: any).
    group: ServerGroup | None = None
    group_members_limit: int = -1
    # The project's quota limits as the handler read them (None: read them here).
    limits: dict[str, int] | None = None
    # False: no network interface (networks "none"); else the hosts' network (auto).
    network: bool = True
    # The neutron backend: the networks and ports checked with Neutron (None: auto), and
    # the security group ids its ports are made with (None: the project's default).
    networks: list[dict[str, str]] | None = None
    security_groups: list[str] | None = None


def hostname_of(display_name: str, count: int) -> str | None:
    """Nova's `sanitize_hostname` of a display name, short enough for its `-N` suffixes;
    None when nothing is left (the instance is then named after its uuid)."""
    name = re.sub(r"[ _.]", "-", display_name)
    name = re.sub(r"[^A-Za-z0-9-]+", "", name).lower().strip(".-")
    room = 63 - (len(f"-{count}") if count > 1 else 0)
    name = name[:room].rstrip("-")
    return name or None


def reservation_id() -> str:
    return "r-" + uuidlib.uuid4().hex[:8]


class Builds:
    """Creates servers: quota, scheduling, the views."""

    def __init__(self, config: dict[str, Any], store: Store, placement: PlacementClient,
                 quotas: Quotas, servers: Servers):
        self.config = config
        self.settings = config["scheduler"]
        self.store = store
        self.placement = placement
        self.quotas = quotas
        self.servers = servers
        # One Scheduler per thread of a worker (it keeps per-request state), all sharing
        # one cache of the hosts' validated messages (a copy a thread was ~5 MB at 1000
        # hosts: 16 threads held 236 MB of RSS in the API's bench).
        self._local = threading.local()
        self._schedulers: list[Scheduler] = []
        self._decoded: Cache = {}

    @property
    def scheduler(self) -> Scheduler:
        scheduler = getattr(self._local, "scheduler", None)
        if scheduler is None:
            scheduler = self._local.scheduler = Scheduler(
                self.config, store=self.store, placement=self.placement,
                decoded=self._decoded)
            self._schedulers.append(scheduler)
        return scheduler

    def create(self, build: Build) -> tuple[list[dict[str, Any]], str]:
        """The views of the servers made (ERROR ones with a fault when no host could take
        them) and the request's reservation id. OverQuota, UsageError before anything is
        written; ServiceUnavailable when etcd or Placement cannot be reached."""
        uuids = [str(uuidlib.uuid4()) for _ in range(build.max_count)]
        now = time.time()
        template = self._template(build, now)
        flavor = build.flavor
        with self.quotas.reserve(build.project_id, build.user_id, uuids, flavor.vcpus,
                                 flavor.ram, build.min_count, build.limits) as reservation:
            chosen = reservation.consumers
            self._check_group(build, len(chosen))
            group = build.group
            query = flavor.query() + build.extra_query
            hostname = hostname_of(build.name, len(chosen))
            request = RequestSpec.build(
                query, count=len(chosen), name=hostname, image_url=build.image.url,
                glance_image=build.image.glance,
                user_data=build.user_data, ssh_key=build.public_key,
                required_resources=self.settings["required_resources"],
                project_id=build.project_id, user_id=build.user_id, uuids=chosen,
                server=template, group=(group.id, group.policy) if group else None,
                group_max=group.max_per_host if group else None,
                network=build.network, networks=build.networks,
                security_groups=build.security_groups)
            try:
                destinations = self._schedule(request)
            except (NoValidHost, ConflictError) as exc:
                return self._failed(build, request, template, exc, now), \
                    template["reservation_id"]
            try:
                self.quotas.recheck(reservation)
                self._check_group(build, 0)  # Nova's recheck of the group's members
            except OverQuota:
                self._undo(destinations)
                raise
        docs = [self._view(template, request, d, i) for i, d in enumerate(destinations)]
        return docs, template["reservation_id"]

    def _check_group(self, build: Build, joining: int) -> None:
        """OverQuota when the group would have more members than its project allows."""
        if build.group is None or build.group_members_limit < 0:
            return
        members = ServerGroups(self.store).member_count(build.group)
        if members + joining > build.group_members_limit:
            raise OverQuota("Quota exceeded, too many servers in group")

    def _template(self, build: Build, now: float) -> dict[str, Any]:
        """The `server` message every instance of the request starts from."""
        return {
            "project_id": build.project_id, "user_id": build.user_id, "name": build.name,
            "description": build.description, "flavor": build.flavor.snapshot(),
            "image": {"id": build.image.id, "url": build.image.url},
            "key_name": build.key_name, "metadata": dict(build.metadata or {}),
            "availability_zone": build.availability_zone,
            "access_ipv4": build.access_ipv4, "access_ipv6": build.access_ipv6,
            "user_data": build.user_data_b64, "reservation_id": reservation_id(),
            "tags": list(build.tags or []), "created_at": now,
            # The create's (the API request's): its instances' create actions carry it.
            "request_id": action_txn.request_id(),
        }

    def _schedule(self, request: RequestSpec) -> list[Destination]:
        """Through the scheduler service when one takes requests, else here."""
        if self.settings["use_service"]:
            destinations = QueueClient(self.store, self.settings).schedule(request)
            if destinations is not None:
                return destinations
        return self.scheduler.select_destinations(request)

    @staticmethod
    def _view(template: dict[str, Any], request: RequestSpec, destination: Destination,
              index: int) -> dict[str, Any]:
        from etcd_compute.scheduler.spec import server_view

        return server_view(template, destination, index, request.count, template["created_at"])

    def _failed(self, build: Build, request: RequestSpec, template: dict[str, Any],
                exc: EtcdComputeError, now: float) -> list[dict[str, Any]]:
        """Servers in ERROR with Nova's fault: nothing was claimed for them."""
        details = "; ".join(exc.reasons) if isinstance(exc, NoValidHost) else str(exc)
        fault = {"code": 500, "message": NO_VALID_HOST, "details": details[:65535],
                 "created": now}
        docs = []
        for index, uuid in enumerate(request.uuids or []):
            name = request.instance_name(index, uuid)
            docs.append(self._view({**template, "fault": fault}, request,
                                   Destination(uuid, name, uuid, "-", {}), index))
        LOG.info("create of %d server(s) for project %s: no valid host (%s)", len(docs),
                 build.project_id, details[:300])
        self.servers.write_failed(docs)
        return docs

    def _undo(self, destinations: list[Destination]) -> None:
        """Destroy what a create made once its recheck found the project over quota."""
        from etcd_compute.ops import operations

        for destination in destinations:
            try:
                operations.destroy(self.store, self.placement, destination.uuid)
            except EtcdComputeError as exc:
                LOG.error("could not destroy %s after its quota recheck failed: %s",
                          destination.uuid, exc)

    def close(self) -> None:
        for scheduler in self._schedulers:
            scheduler.close()
