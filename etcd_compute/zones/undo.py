"""Taking back, in one zone, what a request across zones did there, when another zone failed.

Claims are freed in the zone's Placement. Instances written to its etcd are
removed as if never written while nobody has acted on them (still SCHEDULED,
spec untouched: `instances.scheduling.unschedule`); one a host already began to build is
destroyed through that host (`operations.destroy`), which frees its claim.
Each function returns what it could not take back (the zone is unreachable):
the request's intent keeps those for a later sweep (`journal.py`).
"""

from __future__ import annotations

import logging

from etcd_compute import claims
from etcd_compute.errors import EtcdComputeError
from etcd_compute.ops import take_back as taking_back
from etcd_compute.ops.take_back import Undone
from etcd_compute.zones.tree import ZONE_FAULTS, Zone

LOG = logging.getLogger(__name__)

__all__ = ["Undone", "take_back", "unclaim", "unwrite"]


def unclaim(zone: Zone, uuids: list[str]) -> list[str]:
    """Free the claims of `uuids` in the zone's Placement; those that could not be freed."""
    if not uuids:
        return []
    try:
        return claims.unclaim(zone.placement, uuids)
    except ZONE_FAULTS:
        return list(uuids)


def unwrite(zone: Zone, uuids: list[str]) -> Undone:
    """Remove the instances `uuids` from the zone's etcd (their claims stay: see `take_back`).
    Those never written there count as taken back (`ops.take_back.unwrite`); if the zone
    cannot be reached, what is not done yet is left for a later sweep."""
    try:
        done = taking_back.unwrite(zone.store, zone.placement, uuids,
                                   zone.scheduler.settings["etcd_max_txn_ops"])
        for uuid in done.destroyed:
            LOG.info("zone %s: instance %s had been taken by its host; destroyed through it",
                     zone.label, uuid)
        return done
    except ZONE_FAULTS as exc:
        LOG.warning("zone %s: cannot take back %d instance(s) now (%s); kept for a later "
                    "sweep", zone.label, len(uuids), exc)
        return Undone(left=list(uuids))
    except EtcdComputeError as exc:  # the instance changed too often: leave it for the sweep
        LOG.warning("zone %s: %s", zone.label, exc)
        return Undone(left=list(uuids))


def take_back(zone: Zone, uuids: list[str], written: bool) -> list[str]:
    """Undo a request's instances `uuids` in `zone`: remove them from its etcd if they may
    have been `written`, then free their claims. The uuids left (for a later sweep)."""
    done = unwrite(zone, uuids) if written else Undone(taken_back=list(uuids))
    return done.left + unclaim(zone, done.taken_back)
