"""Finding an instance in any zone: here first, then the index of the instances placed from
here (`/zone-of/<uuid>`), then a search of the zones below (an instance placed from a
zone in between, or straight in a child, is in no index here).

Every zone also answers for its own instances on its own: `schedule.py UUID` in the
zone reads its own etcd, as without zones.
"""

from __future__ import annotations

from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage, NotFound
from etcd_compute.etcd import Compare, Delete, Txn
from etcd_compute.instances import records
from etcd_compute.ops import operations
from etcd_compute.zones.tree import Zone, ZoneTree


def _here(zone: Zone, uuid: str) -> bool:
    return records.find(zone.store, uuid)[0] is not None


def indexed(tree: ZoneTree, uuid: str) -> str | None:
    """The zone path the index here gives for `uuid`, or None."""
    store = tree.root.store
    try:
        message, _ = store.read(messages.ZONE_INSTANCE, store.keys.zone_of(uuid))
    except InvalidMessage:
        return None
    return message["zone"] if message else None


def zone_of(tree: ZoneTree, uuid: str) -> Zone:
    """The zone that holds `uuid`. This zone when nobody knows it (its commands then say
    so as they always did); NotFound naming the zones that could not be searched when
    some could not. ZoneUnreachable when the index names a zone that cannot be reached."""
    operations.check_uuid(uuid)
    if _here(tree.root, uuid):
        return tree.root
    path = indexed(tree, uuid)
    if path is not None:
        return tree.find(path)
    walk = tree.walk(lambda zone: zone.path != "" and _here(zone, uuid))
    found = sorted(path for path, yes in walk.results.items() if yes)
    if found:
        return walk.zones[found[0]]
    if walk.unreachable:
        raise NotFound(f"no instance {uuid} here or in the zones below that could be searched "
                       f"({', '.join(sorted(p or tree.root.label for p in walk.unreachable))} "
                       "unreachable)")
    return tree.root


def forget(tree: ZoneTree, uuid: str) -> None:
    """Drop the index entry of an instance its zone no longer has (if unchanged since)."""
    store = tree.root.store
    entry = store.get(store.keys.zone_of(uuid))
    if entry is not None:
        store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision)],
                         [Delete(entry.key)]))


def list_all(tree: ZoneTree, host: str | None = None,
             state: str | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Every instance record of every reachable zone (each with its `zone` when there are
    zones below this one), oldest first,
    and the zones that could not be listed. NotFound when `host` is a host of no zone."""

    def visit(zone: Zone) -> list[dict[str, Any]] | None:
        try:
            return operations.list_instances(zone.store, host, state)
        except NotFound:
            return None  # not a host of this zone

    walk = tree.walk(visit)
    if host is not None and all(found is None for found in walk.results.values()):
        raise NotFound(f"no host {host!r} in any zone: neither a live host nor the host of "
                       "any instance (give its name or provider uuid)")
    # Without zones below, the records are as they always were (no zone).
    zoned = len(walk.zones) > 1 or bool(walk.unreachable)
    listed = [{**record, "zone": zone.label} if zoned else record
              for path, zone in walk.zones.items() for record in walk.results.get(path) or []]
    listed.sort(key=lambda r: (r.get("created_at") or 0, r["uuid"]))
    return listed, {path or tree.root.label: why for path, why in walk.unreachable.items()}
