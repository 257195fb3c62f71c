"""Quotas: a project's limits (ours, in etcd) against its usage (Placement's).

Limits: `api.quotas` for every project (as an admin changed them for all:
`/quota-classes/default`, os-quota-class-sets), a project's own where an admin set them
(`/quotas/<project_id>`, os-quota-sets). We keep them in etcd rather than in Keystone's
unified limits: `openstack quota set` then works as it does against Nova's database
driver (unified limits make Nova's os-quota-sets read-only), and the API needs no
Keystone admin rights of its own. See docs/reference/compute-api.md, "Quotas".

Usage is counted as Nova counts it from Placement (`GET /usages?project_id=`, consumers of
type INSTANCE): instances are the consumers, cores their VCPU, ram their MEMORY_MB.

Racing creates: each create counts usage plus the creates in flight (their
reservations, `/quota-reservations/<project>/<uuid>`), and writes its own reservation in
one etcd transaction that holds only if no other reservation of the project was made
since it counted: creates of one project are admitted one at a time, each seeing the
others. A reservation names its instances' uuids; once they hold claims in Placement
they are counted there instead (a count is taken again if Placement's usage moved while
it was read, so nothing is counted twice or missed). After its claim a create counts
again (`recheck`, as Nova's `recheck_quota`), then drops its reservation; a reservation
of an API that died expires with its lease.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage
from etcd_compute.etcd import (
    Delete,
    KeyValueStore,
    Txn,
    absent,
    none_created_since,
    put_message,
)
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger(__name__)

# Nova's quota names for what Placement counts.
COUNTED = {"instances": "consumer_count", "cores": "VCPU", "ram": "MEMORY_MB"}
LIMITS = ("instances", "cores", "ram", "key_pairs", "metadata_items", "server_groups",
          "server_group_members")
# The default class also keeps what Nova's does of quotas nothing here counts (there is
# no network service, no file injection): shown, never enforced, as Nova's under Neutron.
CLASS_ONLY = ("floating_ips", "fixed_ips", "security_groups", "security_group_rules",
              "injected_files", "injected_file_content_bytes", "injected_file_path_bytes")
DEFAULT_CLASS = "default"
# How often a count is taken again while Placement's usage keeps moving under it, and a
# reservation tried again while other creates of the project keep reserving.
COUNT_TRIES, RESERVE_TRIES = 5, 50


class OverQuota(Exception):
    """A create would exceed its project's limits (403, Nova's message)."""


@dataclass
class Reservation:
    project_id: str
    uuid: str
    consumers: list[str]
    resources: dict[str, int]
    lease: int | None = None
    # The limits it was admitted under.
    limits: dict[str, int] | None = None


@dataclass
class Count:
    """A project's usage: what Placement holds for it, and the creates not claimed yet."""

    used: dict[str, int]
    pending: dict[str, int] = field(default_factory=dict)
    revision: int = 0

    def total(self, quota: str) -> int:
        key = COUNTED[quota]
        return self.used.get(key, 0) + self.pending.get(key, 0)


class Quotas:
    def __init__(self, store: KeyValueStore, placement: PlacementClient,
                 settings: dict[str, Any], consumer_type: str = "INSTANCE",
                 max_wait: float = 600.0):
        self.store = store
        self.keys = store.keys
        self.placement = placement
        self.defaults = dict(settings["quotas"])
        self.reservation_seconds = int(settings["quota_reservation_seconds"])
        # A create may wait this long for the scheduler service; a reservation must last.
        self.reservation_min_seconds = min(self.reservation_seconds, max_wait + 60.0)
        self.consumer_type = consumer_type
        self._lock = threading.Lock()
        self._held: tuple[int, float] | None = None

    # --- limits ----------------------------------------------------------------------------

    def limits(self, project_id: str) -> dict[str, int]:
        """The project's limits: its own where set, else the defaults (-1: unlimited)."""
        own = self._own(project_id)
        defaults = self.default_limits()
        return {name: own.get(name, defaults.get(name, -1)) for name in LIMITS}

    def default_limits(self) -> dict[str, int]:
        """Every project's limits unless it has its own: `api.quotas`, as an admin changed
        them (the default quota class), with the class's values of CLASS_ONLY quotas."""
        try:
            changed, _ = self.store.read(messages.QUOTA_CLASS,
                                         self.keys.quota_class(DEFAULT_CLASS))
        except InvalidMessage:
            changed = None  # unreadable: api.quotas hold until an admin sets them again
        changed = {k: v for k, v in (changed or {}).items() if k != "updated_at"}
        return {**{name: self.defaults.get(name, -1) for name in LIMITS}, **changed}

    def update_defaults(self, changes: dict[str, int]) -> dict[str, int]:
        """Change the default quota class (every project without its own limits)."""
        key = self.keys.quota_class(DEFAULT_CLASS)
        try:
            stored, _ = self.store.read(messages.QUOTA_CLASS, key)
        except InvalidMessage:
            stored = None
        kept = {k: v for k, v in (stored or {}).items() if k != "updated_at"}
        kept.update(changes)
        self.store.put(messages.QUOTA_CLASS, key, {**kept, "updated_at": time.time()})
        return self.default_limits()

    def _own(self, project_id: str) -> dict[str, Any]:
        try:
            message, _ = self.store.read(messages.QUOTA_SET, self.keys.quota(project_id))
        except InvalidMessage:
            message = None  # unreadable: the defaults hold until an admin sets it again
        return message or {}

    def update(self, project_id: str, changes: dict[str, int]) -> dict[str, int]:
        own = {k: v for k, v in self._own(project_id).items() if k in LIMITS}
        own.update(changes)
        self.store.put(messages.QUOTA_SET, self.keys.quota(project_id),
                       {**own, "updated_at": time.time()})
        return self.limits(project_id)

    def reset(self, project_id: str) -> None:
        """Back to the defaults (os-quota-sets DELETE)."""
        self.store.delete(self.keys.quota(project_id))

    # --- a user's limits in a project (Nova's legacy per-user quotas) -----------------------

    def _own_user(self, project_id: str, user_id: str) -> dict[str, Any]:
        try:
            message, _ = self.store.read(messages.QUOTA_SET,
                                         self.keys.quota_user(project_id, user_id))
        except InvalidMessage:
            message = None  # unreadable: the project's limits hold
        return {k: v for k, v in (message or {}).items() if k in LIMITS}

    def user_limits(self, project_id: str, user_id: str) -> dict[str, int]:
        """The user's limits in the project: its own where set, else the project's."""
        return {**self.limits(project_id), **self._own_user(project_id, user_id)}

    def update_user(self, project_id: str, user_id: str,
                    changes: dict[str, int]) -> dict[str, int]:
        own = {**self._own_user(project_id, user_id), **changes}
        self.store.put(messages.QUOTA_SET, self.keys.quota_user(project_id, user_id),
                       {**own, "updated_at": time.time()})
        return self.user_limits(project_id, user_id)

    def reset_user(self, project_id: str, user_id: str) -> None:
        self.store.delete(self.keys.quota_user(project_id, user_id))

    # --- usage -----------------------------------------------------------------------------

    def usage(self, project_id: str, user_id: str | None = None) -> dict[str, int]:
        """In use now, by Nova's quota names (instances, cores, ram): the project's, or
        one of its users'."""
        count = self.count(project_id, user_id=user_id)
        return {quota: count.total(quota) for quota in COUNTED}

    def count(self, project_id: str, leave_out: str | None = None,
              exact: bool = True, user_id: str | None = None) -> Count:
        """Placement's usage plus the reservations of creates not claimed yet (but
        `leave_out`), read so that no create is counted twice or missed. `exact=False`:
        one read of each, every reservation counted (a claimed one twice): never less than
        the truth, and enough while the project is far from its limits. `user_id`: that
        user's part only."""
        prefix = self.keys.quota_reservations(project_id)
        used = self._placement_usage(project_id, user_id)
        for _ in range(COUNT_TRIES):
            entries, revision = self.store.get_prefix(prefix)
            pending: dict[str, int] = {}
            for entry in entries:
                if entry.key == self.keys.quota_reservation(project_id, leave_out or ""):
                    continue
                try:
                    held = messages.decode(messages.QUOTA_RESERVATION, entry.value)
                except InvalidMessage:
                    continue
                if user_id is not None and held["user_id"] != user_id:
                    continue
                # All of a request's instances are claimed in one atomic call.
                if exact and \
                        self.placement.get_allocations(held["consumers"][0]).get("allocations"):
                    continue  # claimed: Placement counts it
                for name, amount in held["resources"].items():
                    pending[name] = pending.get(name, 0) + amount
            if not exact:
                return Count(used, pending, revision)
            again = self._placement_usage(project_id, user_id)
            if again == used:
                return Count(used, pending, revision)
            used = again  # a claim landed or went while we looked: look again
        return Count(used, pending, revision)

    def _placement_usage(self, project_id: str, user_id: str | None = None) -> dict[str, int]:
        return self.placement.project_usages(project_id, self.consumer_type, user_id)

    # --- creates -----------------------------------------------------------------------------

    def allowed(self, project_id: str, vcpus: int, ram: int, min_count: int, max_count: int,
                count: Count | None = None, limits: dict[str, int] | None = None) -> int:
        """How many of min_count..max_count instances of this size fit (Nova's
        `check_num_instances_quota`): the most that fit, or OverQuota with Nova's message."""
        limits = limits or self.limits(project_id)
        count = count or self.count(project_id)
        deltas = {"instances": max_count, "cores": max_count * vcpus, "ram": max_count * ram}
        overs = [q for q in ("cores", "instances", "ram")
                 if limits[q] >= 0 and count.total(q) + deltas[q] > limits[q]]
        if not overs:
            return max_count
        headroom = {q: limits[q] - count.total(q) for q in COUNTED if limits[q] >= 0}
        allowed = headroom.get("instances", max_count)
        if vcpus and "cores" in headroom:
            allowed = min(allowed, headroom["cores"] // vcpus)
        if ram and "ram" in headroom:
            allowed = min(allowed, headroom["ram"] // ram)
        if allowed > 0 and min_count <= allowed <= max_count:
            return self.allowed(project_id, vcpus, ram, min_count, allowed, count, limits)
        instances = str(min_count) if min_count == max_count else f"{min_count}-{max_count}"
        requested = {"instances": instances, "cores": str(max_count * vcpus),
                     "ram": str(max_count * ram)}
        raise OverQuota(
            f"Quota exceeded for {', '.join(overs)}: Requested "
            f"{', '.join(requested[q] for q in overs)}, but already used "
            f"{', '.join(str(limits[q] - headroom[q]) for q in overs)} of "
            f"{', '.join(str(limits[q]) for q in overs)} {', '.join(overs)}")

    @contextmanager
    def reserve(self, project_id: str, user_id: str, consumers: list[str],
                vcpus: int, ram: int, min_count: int,
                limits: dict[str, int] | None = None) -> Iterator[Reservation]:
        """Count the create (its `consumers`, each `vcpus` and `ram`) against the
        project's quota and hold its place until the block ends: OverQuota when fewer
        than `min_count` of them fit. The reservation names as many consumers as fit.
        `limits`: the project's, as the caller read them for this request."""
        limits = limits or self.limits(project_id)
        # A user's own limits (legacy per-user quotas) count the user's part as well.
        user_limits = self._own_user(project_id, user_id)
        user_limits = {**limits, **user_limits} if any(
            q in user_limits for q in COUNTED) else None
        if all(limits[q] < 0 for q in COUNTED) and user_limits is None:
            yield Reservation(project_id, str(uuidlib.uuid4()), list(consumers),
                              {"consumer_count": len(consumers)})
            return
        prefix = self.keys.quota_reservations(project_id)
        lease = self._lease()
        for _ in range(RESERVE_TRIES):
            count = self.count(project_id, exact=False)
            try:
                fits = self.allowed(project_id, vcpus, ram, min_count, len(consumers), count,
                                    limits)
            except OverQuota:
                fits = 0
            if fits < len(consumers):  # near the limit: count exactly before refusing
                count = self.count(project_id)
                fits = self.allowed(project_id, vcpus, ram, min_count, len(consumers), count,
                                    limits)
            if user_limits is not None:
                fits = self.allowed(project_id, vcpus, ram, min_count, fits,
                                    self.count(project_id, user_id=user_id), user_limits)
            reservation = Reservation(
                project_id, str(uuidlib.uuid4()), consumers[:fits],
                {"consumer_count": fits, "VCPU": fits * vcpus, "MEMORY_MB": fits * ram},
                lease, limits)
            if self._write(reservation, user_id, prefix, count.revision):
                break
        else:
            raise OverQuota("Quota exceeded: too many creates of this project at once; "
                            "try again")
        try:
            yield reservation
        finally:
            self._release(reservation)

    def _write(self, reservation: Reservation, user_id: str, prefix: str,
               revision: int) -> bool:
        """The reservation, if no other of the project was made since `revision`."""
        key = self.keys.quota_reservation(reservation.project_id, reservation.uuid)
        written = self.store.commit(Txn(
            [absent(key), none_created_since(prefix, revision)],
            [put_message(messages.QUOTA_RESERVATION, key,
                         {"consumers": reservation.consumers,
                          "resources": reservation.resources, "user_id": user_id,
                          "created_at": time.time()}, reservation.lease)]))
        return written is not None

    def _lease(self) -> int:
        """A lease for reservations: one per process, granted again once it has less left
        than a create may take (the scheduler's wait plus a minute), so each reservation
        outlives its create and one of an API that died goes within the lease's TTL."""
        with self._lock:
            now = time.monotonic()
            if self._held is None or self._held[1] - now < self.reservation_min_seconds:
                self._held = (self.store.grant(self.reservation_seconds),
                              now + self.reservation_seconds)
            return self._held[0]

    def recheck(self, reservation: Reservation) -> None:
        """After the claim: the project within its limits, its other creates counted
        (OverQuota otherwise: limits lowered meanwhile, or a reservation that expired).
        While the limits are those it was admitted under and its reservation held all
        along, every create since counted it: nothing more to count."""
        if reservation.lease is None:
            return  # unlimited when admitted
        key = self.keys.quota_reservation(reservation.project_id, reservation.uuid)
        limits = self.limits(reservation.project_id)
        if limits == reservation.limits and self.store.get(key) is not None:
            return

        def overs(count: Count) -> list[str]:
            return [q for q in ("cores", "instances", "ram")
                    if limits[q] >= 0 and count.total(q) > limits[q]]

        count = self.count(reservation.project_id, leave_out=reservation.uuid, exact=False)
        if not overs(count):
            return  # even counting every other create's reservation, within limits
        count = self.count(reservation.project_id, leave_out=reservation.uuid)
        over = overs(count)
        if over:
            raise OverQuota(
                f"Quota exceeded for {', '.join(over)}: Requested "
                f"{', '.join(str(reservation.resources[COUNTED[q]]) for q in over)}, but "
                f"already used {', '.join(str(count.total(q)) for q in over)} of "
                f"{', '.join(str(limits[q]) for q in over)} {', '.join(over)}")

    def _release(self, reservation: Reservation) -> None:
        try:
            self.store.commit(Txn([], [Delete(self.keys.quota_reservation(
                reservation.project_id, reservation.uuid))]))
        except EtcdComputeError as exc:  # it expires with its lease
            LOG.warning("could not drop quota reservation %s (%s); it expires within %d s",
                        reservation.uuid, exc, self.reservation_seconds)
