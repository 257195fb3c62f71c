"""One request across zones: all or nothing, whichever zones it lands in.

1. Ask this zone and every reachable zone below it (in parallel, each with
   its own Scheduler) how much of the request it can take, best first
   (`estimate.py`); unreachable zones are skipped, with the reason.
2. Merge the answers by weight into one plan: which zone takes how many
   (`merge.py`). A server group with affinity stays in one zone; policies
   hold within each zone, as its own filters enforce them.
3. Write the intent (`journal.py`), claim in every chosen zone at once,
   and only when every claim holds, write the specs in every chosen zone at
   once (each zone: one Placement call, one etcd transaction, as a request
   made there). Then index the instances and drop the intent.
4. If a zone fails, take back what was done in the others (`undo.py`). A lost
   zone (unreachable mid-request) is left out and the request planned again,
   so it completes elsewhere if the other zones have room; a lost race (a 409,
   a group that changed) is planned again, as in one zone.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.errors import ConflictError, EtcdComputeError, NoValidHost
from etcd_compute.scheduler import Destination, RequestSpec
from etcd_compute.scheduler.spec_writer import check_txn_ops
from etcd_compute.zones import journal, merge, undo
from etcd_compute.zones.estimate import Estimate, estimate, reasons
from etcd_compute.zones.tree import ZONE_FAULTS, Zone, ZoneTree

LOG = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Placed:
    """Where one instance went: its zone (path below here, "" for this zone) and host."""

    zone: str
    destination: Destination

    def as_dict(self) -> dict[str, Any]:
        return {**self.destination.as_dict(), "zone": self.zone}


class ZoneLost(EtcdComputeError):
    """A zone became unreachable during the request (everything was taken back)."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"zone {path or '(here)'} lost: {reason}")
        self.path, self.reason = path, reason


class Retry(EtcdComputeError):
    """A race was lost in some zone (everything was taken back): plan again."""


def in_parallel(paths: list[str], call: Callable[[str], T]
                ) -> tuple[dict[str, T], dict[str, BaseException]]:
    """`call(path)` for every path at once: ({path: result}, {path: exception})."""
    done: dict[str, T] = {}
    failed: dict[str, BaseException] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(paths))),
                            thread_name_prefix="zone") as pool:
        futures = {path: pool.submit(call, path) for path in paths}
        for path, future in futures.items():
            try:
                done[path] = future.result()
            except Exception as exc:  # noqa: BLE001 (sorted out by the caller)
                failed[path] = exc
    return done, failed


class Federation:
    """Schedules over a ZoneTree: this zone and the zones below it."""

    def __init__(self, tree: ZoneTree, rng: random.Random | None = None,
                 clock: Clock = SYSTEM):
        self.tree = tree
        self.clock = clock
        self.settings = tree.config["scheduler"]
        self.rng = rng or random.Random()
        self.replans = 0
        # Placement's 409s in the zones of the last plan (as `schedule.py --json` reports).
        self.conflicts = 0
        # What the sweep at the start of the last request did (journal.sweep).
        self.swept: list[str] = []

    def select_destinations(self, request_spec: RequestSpec,
                            route: str | None = None) -> list[Placed]:
        """Place `request_spec.count` instances in this zone and those below it (or, with
        `route` "a/b", in that zone and those below it); all or nothing across zones.
        NoValidHost (reasons per zone, unreachable ones included), ConflictError when every
        retry lost a race, UsageError."""
        check_txn_ops(request_spec, self.settings)
        self.swept = journal.sweep(self.tree, self.tree.config["zones"]["intent_grace_seconds"])
        lost: dict[str, str] = {}
        races = 0
        while True:
            walk = self.tree.walk(
                lambda zone: None if zone.path in lost else estimate(zone.scheduler,
                                                                     request_spec), route)
            unreachable = {**walk.unreachable, **lost}
            estimates = {path: found for path, found in walk.results.items() if found}
            counts = self._split(request_spec, estimates)
            if sum(counts.values()) < request_spec.count:
                raise NoValidHost(self._reasons(request_spec, walk.zones, estimates, counts,
                                                unreachable))
            try:
                return self._execute(request_spec, walk.zones, estimates, counts)
            except ZoneLost as exc:
                LOG.warning("%s; planning again without it", exc)
                lost[exc.path] = f"lost during the request ({exc.reason})"
            except Retry as exc:
                races += 1
                self.replans += 1
                if races > self.settings["claim_retries"]:
                    raise ConflictError(f"lost the race for capacity {races} times (last: "
                                        f"{exc}); try again", 409) from None
                self.clock.sleep(self.rng.uniform(0, min(1.0, 0.05 * 2 ** races)))

    def _split(self, request_spec: RequestSpec, estimates: dict[str, Estimate]) -> dict[str, int]:
        affinity = request_spec.group is not None and request_spec.group[1] == "affinity"
        return merge.split({path: found.raw for path, found in estimates.items()},
                           [multiplier for _, multiplier in self.tree.root.scheduler.weighers],
                           request_spec.count, self.rng, one_zone=affinity,
                           prefer={path for path, found in estimates.items()
                                   if found.group_members})

    # ---------------------------------------------------------------- execute

    def _execute(self, request_spec: RequestSpec, zones: dict[str, Zone],
                 estimates: dict[str, Estimate], counts: dict[str, int]) -> list[Placed]:
        chosen = sorted(counts)
        batches: dict[str, list[Destination]] = {}
        first = 0
        for path in chosen:
            scheduler = zones[path].scheduler
            batches[path] = scheduler.destinations(
                request_spec, estimates[path].picks[:counts[path]], first)
            first += counts[path]
            # Before any claim: a transaction etcd would refuse fails the request here.
            scheduler.transaction(request_spec, batches[path], estimates[path].group_revision)
        uuids = {path: [d.uuid for d in batches[path]] for path in chosen}
        root = self.tree.root.store
        intent = journal.begin(root, uuids)

        claimed, failed = in_parallel(chosen,
                                      lambda path: zones[path].scheduler.claim(batches[path]))
        if failed:
            self._undo(intent, zones, uuids, written=set())
            raise self._why(failed)
        # Built again so that the specs' requested_at is the write's time, not the claims'.
        txns = {path: zones[path].scheduler.transaction(
                    request_spec, batches[path], estimates[path].group_revision, checked=False)
                for path in chosen}
        written, failed = in_parallel(chosen, lambda path: zones[path].store.commit(txns[path]))
        refused = {path: Retry(f"group {request_spec.group[0] if request_spec.group else ''} "
                               f"changed in zone {path or '(here)'} while we planned")
                   for path, revision in written.items() if revision is None}
        if failed or refused:
            # A commit that raised may have been applied before the answer was lost.
            self._undo(intent, zones, uuids,
                       written={p for p, r in written.items() if r is not None} | set(failed))
            raise self._why({**failed, **refused})
        journal.finish(root, intent, {uuid: path for path in chosen for uuid in uuids[path]})
        self.conflicts = sum(zones[path].placement.conflicts for path in estimates)
        return [Placed(path, d) for path in chosen for d in batches[path]]

    def _undo(self, intent: str, zones: dict[str, Zone], uuids: dict[str, list[str]],
              written: set[str]) -> None:
        """Take back every zone's part; what cannot be now stays in the intent."""
        left, failed = in_parallel(list(uuids), lambda path: undo.take_back(
            zones[path], uuids[path], written=path in written))
        root = self.tree.root.store
        remaining = {path: left.get(path, uuids[path]) for path in uuids}
        if failed:
            LOG.error("taking back the request: %s", next(iter(failed.values())))
        try:
            if any(remaining.values()):
                journal.abandon(root, intent, remaining)
            else:
                journal.drop(root, intent)
        except ZONE_FAULTS as exc:
            LOG.error("zone intent %s stays for the next sweep: %s", intent, exc)

    @staticmethod
    def _why(failed: dict[str, BaseException]) -> EtcdComputeError:
        """The error a failed step raises: a lost zone, a lost race, or the fault itself."""
        for path, exc in sorted(failed.items()):
            if isinstance(exc, ZONE_FAULTS):
                return ZoneLost(path, str(exc))
        for exc in failed.values():
            if isinstance(exc, ConflictError | Retry):
                return Retry(str(exc))
        exc = next(iter(failed.values()))
        if isinstance(exc, EtcdComputeError):
            return exc
        raise exc

    # ---------------------------------------------------------------- explain

    def _reasons(self, request_spec: RequestSpec, zones: dict[str, Zone],
                 estimates: dict[str, Estimate], counts: dict[str, int],
                 unreachable: dict[str, str]) -> list[str]:
        """NO ALLOCATIONS LEFT, why: the total, then each zone's own reasons, then the zones
        that were skipped."""
        fit = sum(found.fit for found in estimates.values())
        affinity = request_spec.group is not None and request_spec.group[1] == "affinity"
        room = max((f.fit for f in estimates.values()), default=0) if affinity else fit
        lines = []
        if request_spec.count > 1 or fit:
            lines.append(f"room for only {min(room, request_spec.count)} of the "
                         f"{request_spec.count} instances requested across {len(estimates)} "
                         "zone(s); nothing was claimed")
        if affinity and fit:
            lines.append(f"group {request_spec.group[0]} has affinity: its instances stay in "
                         "one zone (the one with its members, if any); none has room for all")
        explained, _ = in_parallel(
            sorted(p for p, found in estimates.items() if found.fit < request_spec.count),
            lambda path: reasons(zones[path].scheduler, request_spec, estimates[path]))
        for path in sorted(estimates):
            label = zones[path].label
            if estimates[path].fit:
                lines.append(f"zone {label}: room for {estimates[path].fit}")
            lines += [f"zone {label}: {line}" for line in explained.get(path, [])]
        for path, reason in sorted(unreachable.items()):
            label = path or self.tree.root.label
            lines.append(f"zone {label}: unreachable, skipped ({reason})")
        return lines
