"""The controller's part in a move between hosts (docs/explanation/moves.md).

A host may write only its own keys, so the controller carries a move between its two
ends, with the operator's rights, from `/migrations/<uuid>` and both ends' records and
specs (`step`, on any change of either end's record, and at the sweep):

- the destination made room (its INCOMING record carries the driver's target): the
  target goes into the source's request, which starts the move there;
- the destination could not: the source's request is called off;
- the source's guest left (MIGRATED): live, the instance is handed over (all its keys to
  the destination in one transaction, ACTIVE or SHUTOFF as it was) and the source's
  resources freed in Placement (the migration consumer); cold, what the source sent goes
  into the destination's request first, and the hand-over comes when it defined the guest
  (a move asked with `verify`, the API's migrate, waits `finished` instead for the
  operator's confirm or revert: ops/migrations.py);
- the move ended otherwise on the source (failed, cancelled, refused: the guest runs there
  as before): the instance's claim holds the source again (one Placement request), the
  migration goes and the destination is asked to discard what it made; an instance
  destroyed meanwhile has both claims freed instead (its host could free neither);
- a destroy asked during the move waits for the source's job: a guest that stayed is
  destroyed there (then given up as above); one that left (MIGRATED) is handed over with
  the destroy, which the destination carries out.
- a move reverted by the operator whose guest ran (`reverting`): the source's copy is
  started (the revert's request, in the transaction that deletes the migration) only once
  the destination has no record of it (discarded) or is dead and recovered (fenced: its
  guests are off); never before: two copies of one guest never run.

A dead host in the middle of a move: a source whose guest had left is handed over; one
still moving gives up the move (its recovery follows); a destination's INCOMING record is
not an instance of its own to recover: the move is given up, and its keys there go.
"""

from __future__ import annotations

import logging
from typing import Any

from etcd_compute import claims, events, messages
from etcd_compute.errors import ConflictError, EtcdComputeError, NotFound
from etcd_compute.etcd import Entry, KeyValueStore
from etcd_compute.instances import migrations, records, states
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.controller")


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class MoveSteps:
    def __init__(self, store: KeyValueStore, placement: PlacementClient):
        self.store, self.keys, self.placement = store, store.keys, placement

    def step(self, uuid: str, dead: str | None = None) -> str | None:
        """Take the next step of the instance's move, if one is due; what was done. `dead`:
        a host the controller recovers now (down past its grace, or fenced: its guests
        are off), as its recovery steps its moves."""
        migration, entry = migrations.read(self.store, uuid)
        if migration is None or entry is None:
            return None
        log = instance_log(uuid)
        source = records.read_record(self.store, migration["source"], uuid)
        there = records.read_record(self.store, migration["destination"], uuid)
        source_entry, source_spec = records.read_spec(self.store, migration["source"], uuid)
        if migration["state"] == migrations.REVERTING:
            return self._revert(migration, entry, source, there, source_entry, source_spec,
                                destination_dead=dead == migration["destination"])
        task = (source.record or {}).get("task") or {}
        ours = task.get("id") == migration["request_id"]
        if source.state == states.MIGRATED and ours:
            arrived = (there.record or {}).get("task") or {}
            if arrived.get("finished") and migration.get("verify") and \
                    (source_spec or {}).get("action") != states.DESTROY:
                # Waits for the operator's confirm (the hand-over) or revert (ops/migrations);
                # a destroy asked meanwhile is handed over with it, as any move's.
                if migration["state"] == migrations.FINISHED:
                    return None
                if migrations.await_confirm(self.store, entry, migration, source) is None:
                    return None
                log.info("cold move: defined at %s; awaiting its confirm or revert",
                         migration["destination"])
                return "await confirm"
            if migration["live"] or arrived.get("finished"):
                return self._hand_over(migration, entry, source_entry, source_spec, source,
                                       there)
            there_entry, there_spec = records.read_spec(self.store, migration["destination"], uuid)
            if there_entry is not None and there_spec is not None and \
                    "moved" not in (there_spec.get("request") or {}) and \
                    migration["state"] != migrations.FINISHING:
                migrations.finish(self.store, there_entry, there_spec, entry, migration,
                                  task.get("moved") or {})
                log.info("cold move: its files are at %s, which defines it now",
                         migration["destination"])
                return "finish"
            if there.record is not None and there.record.get("error"):
                return self._give_up(migration, entry, f"the destination: "
                                     f"{there.record['error']}", stranded=source)
            return None
        if source_spec is not None and source_spec.get("action") == states.DESTROY and \
                source.state == states.MIGRATING:
            return None  # a destroy waits on the source for the move's job to end
        if source.record is None or source_spec is None or (
                source.state != states.MIGRATING and
                source.record.get("request_id") == migration["request_id"]):
            return self._give_up(migration, entry, self._why(migration, source))
        if there.record is None or there.state != states.INCOMING:
            if migration["state"] != migrations.FAILING and source_entry is not None:
                migrations.call_off(self.store, source_entry, source_spec,
                                    "the destination lost the instance's record", entry,
                                    migration)
            return "call off"
        if there.record.get("error") and migration["state"] != migrations.FAILING:
            why = f"the destination: {there.record['error']}"
            migrations.call_off(self.store, source_entry, source_spec, why, entry, migration)
            log.warning("move to %s called off: %s", migration["destination"], why)
            return "call off"
        target = ((there.record or {}).get("task") or {}).get("target")
        if target is not None and migration["state"] == migrations.PREPARING and \
                "target" not in (source_spec.get("request") or {}):
            migrations.relay(self.store, source_entry, source_spec, entry, migration, target)
            log.info("%s is ready for it: moving %s", migration["destination"],
                     "live" if migration["live"] else "cold")
            return "relay"
        return None

    def _revert(self, migration: dict[str, Any], entry: Entry, source: records.RecordRead,
                there: records.RecordRead, source_entry: Entry | None,
                source_spec: dict[str, Any] | None, destination_dead: bool) -> str | None:
        """A reverted move whose guest ran: the one place its source's copy is started,
        and only once the destination's copy is gone: discarded (no record there any
        more), or its host dead and recovered (its lease lost, it fenced itself: its
        guests are off; it discards when it returns, its spec still asks it to). A
        destination alive that never discards leaves the source stopped (the operator's
        part: docs/explanation/moves.md). The source's copy is started only if it is
        still there, SHUTOFF, and no destroy or drain asked of it (its host down: it
        starts it when back; recovered elsewhere meanwhile, it is rebuilt stopped, as its
        record says); the migration goes either way, and at once for an instance destroyed
        meanwhile (nothing will start)."""
        uuid = migration["instance"]
        log = instance_log(uuid)
        destroyed = (source_spec or {}).get("action") == states.DESTROY or \
            source.state in (states.DELETING, states.DELETED) or \
            (source.record is None and records.locate(self.store, uuid) is None)
        if there.record is not None and not destination_dead and not destroyed:
            log.debug("revert: waiting for %s to discard its copy", migration["destination"])
            return None
        start = None
        if source_entry is not None and source_spec is not None and \
                source.state == states.SHUTOFF and \
                source_spec.get("action") not in (states.DESTROY, "evacuate"):
            start = (source_entry, source_spec, source)
        if migrations.reverted(self.store, entry, migration, start) is None:
            return None  # something changed: the next event decides
        if start is None:
            log.warning("revert of the move to %s done; its source's copy not started (%s)",
                        migration["destination"], source.state or "gone")
            return "reverted"
        log.warning("revert of the move to %s: %s; its source's copy starts again",
                    migration.get("destination_name") or migration["destination"],
                    "its host is dead" if there.record is not None else "discarded there")
        return "revert started"

    def _why(self, migration: dict[str, Any], source: records.RecordRead) -> str:
        if source.record is None:
            return "the instance left its host"
        last = next((e for e in reversed(events.read(self.store, migration["source"],
                                                        migration["instance"]))
                     if e["action"] == states.MIGRATE), None)
        return (last or {}).get("error") or migration.get("error") or "the move ended"

    def _hand_over(self, migration: dict[str, Any], entry: Entry, source_entry: Entry | None,
                   source_spec: dict[str, Any] | None, source: records.RecordRead,
                   there: records.RecordRead) -> str | None:
        log = instance_log(migration["instance"])
        if source_entry is None or source_spec is None or there.record is None:
            return None
        if migrations.hand_over(self.store, entry, migration, source_entry, source_spec,
                                source, there) is None:
            return None  # something changed: the next event decides
        try:
            claims.release_hold(self.placement, migration["id"])
        except EtcdComputeError as exc:
            log.error("moved, but the source's claim (consumer %s) was not freed: %s; free "
                      "it with DELETE /allocations/%s", migration["id"], exc, migration["id"])
        log.warning("moved to %s (%s); the source's resources freed",
                    migration.get("destination_name") or migration["destination"],
                    "live" if migration["live"] else "cold")
        return "handed over"

    def _give_up(self, migration: dict[str, Any], entry: Entry, why: str,
                 stranded: records.RecordRead | None = None) -> str | None:
        """The move is off: the claim back on the source, the migration gone, the
        destination asked to discard. `stranded`: a cold move's guest was sent but the
        destination could not define it: its source record (MIGRATED) goes back to
        SHUTOFF, the guest stopped there as the move left it."""
        uuid, log = migration["instance"], instance_log(migration["instance"])
        self._claims_back(migration)
        there_entry, there_spec = records.read_spec(self.store, migration["destination"], uuid)
        pending = None
        if there_entry is not None and there_spec is not None and \
                there_spec.get("action") == states.INCOMING_ACTION:
            pending = (there_entry, there_spec)
        if migrations.give_up(self.store, entry, pending, why, stranded) is None:
            return None
        log.warning("move to %s given up: %s%s", migration["destination"], why,
                    " (its stopped copy stays at the source)" if stranded else "")
        return "given up"

    def _claims_back(self, migration: dict[str, Any]) -> None:
        """The move's claims as if it never was: the instance holds the source again (what
        the hold held, one request). An instance no longer at its source (destroyed
        meanwhile: its host could free no claim of it there, the move had it on the
        destination; or rebuilt elsewhere) gets nothing back: the hold goes, and the
        destination's claim too unless the instance is there now."""
        uuid, log = migration["instance"], instance_log(migration["instance"])
        source = records.read_record(self.store, migration["source"], uuid)
        if source.record is not None and source.state not in (states.DELETING,
                                                              states.DELETED):
            try:
                claims.revert_holding(self.placement, uuid, migration["id"])
            except (ConflictError, NotFound):
                log.info("claims not given back (changed since, or given back already)")
            return
        claims.release_hold(self.placement, migration["id"])
        location = records.locate(self.store, uuid)
        if location is None or location["host"] == migration["source"]:
            if claims.free_here(self.placement, uuid, migration["destination"]):
                log.info("the instance went during its move: its claims freed")

    def abandon(self, uuid: str, why: str) -> None:
        """Its source host died while it moved: the move is given up (its recovery
        follows, from the source as the instance's home)."""
        migration, entry = migrations.read(self.store, uuid)
        if migration is not None and entry is not None:
            self._give_up(migration, entry, why)

    def sweep(self) -> int:
        """Every move in flight, a step each (when we become leader)."""
        found = self.store.read_prefix(messages.MIGRATION, self.keys.migrations())
        for uuid in found:
            self.step(uuid)
        return len(found)
