"""A request across zones, written down before it claims: finished or undone if cut short.

No transaction spans two etcds or two Placements. So before claiming in
any zone, the request writes its intent in this zone's etcd
(`/zone-intents/<id>`: the instance uuids it will place in each zone), and
when it is done, one transaction indexes the instances (`/zone-of/<uuid>`)
and drops the intent. A request that fails takes back what it did and drops
the intent; what it could not take back (a zone unreachable just then), it
leaves in the intent, marked abandoned. An intent that is abandoned, or
older than `zones.intent_grace_seconds` (its scheduler was killed), is swept
by the next request at this zone, `zone list` or `zone info`: if every
instance it names exists, the request did complete and is indexed; if not,
what exists is taken back. A zone still unreachable keeps the intent for the
next sweep.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage, UsageError
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Txn, put_message
from etcd_compute.instances import records
from etcd_compute.zones import undo
from etcd_compute.zones.tree import ZONE_FAULTS, ZoneTree, ZoneUnreachable

LOG = logging.getLogger(__name__)


def begin(store: KeyValueStore, zones: dict[str, list[str]]) -> str:
    """Write the intent ({zone path: instance uuids}); its id."""
    intent = str(uuidlib.uuid4())
    store.put(messages.ZONE_INTENT, store.keys.zone_intent(intent),
              {"zones": zones, "created_at": time.time()})
    return intent


def index_ops(store: KeyValueStore, placed: dict[str, str]) -> list[Any]:
    """Index entries for instances placed below this zone ({uuid: zone path})."""
    now = time.time()
    return [put_message(messages.ZONE_INSTANCE, store.keys.zone_of(uuid),
                        {"zone": path, "created_at": now})
            for uuid, path in sorted(placed.items()) if path]


def finish(store: KeyValueStore, intent: str, placed: dict[str, str]) -> None:
    """The request is done: index its instances and drop the intent, in one transaction."""
    store.commit(Txn([], [*index_ops(store, placed), Delete(store.keys.zone_intent(intent))]))


def drop(store: KeyValueStore, intent: str) -> None:
    store.delete(store.keys.zone_intent(intent))


def abandon(store: KeyValueStore, intent: str, left: dict[str, list[str]]) -> None:
    """Keep what could not be taken back, for the next sweep."""
    message, _ = store.read(messages.ZONE_INTENT, store.keys.zone_intent(intent))
    if message is None:
        return
    store.put(messages.ZONE_INTENT, store.keys.zone_intent(intent),
              {**message, "zones": {path: uuids for path, uuids in left.items() if uuids},
               "abandoned": True})


def pending(store: KeyValueStore, grace: float,
            now: float | None = None) -> dict[str, tuple[dict[str, Any], int]]:
    """Intents to sweep: abandoned, or older than `grace` seconds ({id: (intent, revision)});
    an unreadable one is dropped (it can name nothing we could act on)."""
    now = time.time() if now is None else now
    entries, _ = store.get_prefix(store.keys.zone_intents())
    due = {}
    for entry in entries:
        intent = entry.key.rsplit("/", 1)[-1]
        try:
            message = messages.decode(messages.ZONE_INTENT, entry.value)
        except InvalidMessage as exc:
            LOG.warning("dropping unreadable zone intent %s: %s", intent, exc)
            store.commit(Txn([Compare(entry.key, "mod", "==", entry.mod_revision)],
                             [Delete(entry.key)]))
            continue
        if message.get("abandoned") or now - message["created_at"] >= grace:
            due[intent] = (message, entry.mod_revision)
    return due


def sweep(tree: ZoneTree, grace: float, now: float | None = None) -> list[str]:
    """Finish or undo the requests cut short (see the module); one line per request handled."""
    store = tree.root.store
    done = []
    for intent, (message, revision) in pending(store, grace, now).items():
        guard = [Compare(store.keys.zone_intent(intent), "mod", "==", revision)]
        try:
            zones = {path: tree.find(path) for path in message["zones"]}
            exists = {path: [uuid for uuid in uuids
                             if records.locate(zones[path].store, uuid) is not None]
                      for path, uuids in message["zones"].items()}
        except (*ZONE_FAULTS, ZoneUnreachable) as exc:
            LOG.info("zone intent %s: kept for later (%s)", intent, exc)
            continue
        except UsageError as exc:
            # A zone deleted since (zone delete --force): nothing here to act on any more.
            store.commit(Txn(guard, [Delete(store.keys.zone_intent(intent))]))
            done.append(f"request {intent}: dropped ({exc})")
            continue
        if not message.get("abandoned") and all(
                len(exists[path]) == len(uuids) for path, uuids in message["zones"].items()):
            placed = {uuid: path for path, uuids in message["zones"].items() for uuid in uuids}
            store.commit(Txn(guard, [*index_ops(store, placed),
                                     Delete(store.keys.zone_intent(intent))]))
            done.append(f"request {intent}: had completed; {len(placed)} instance(s) indexed")
            continue
        left = {path: undo.take_back(zones[path], uuids, written=bool(exists[path]))
                for path, uuids in message["zones"].items()}
        if any(left.values()):
            store.commit(Txn(guard, [put_message(
                messages.ZONE_INTENT, store.keys.zone_intent(intent),
                {**message, "zones": {p: u for p, u in left.items() if u}, "abandoned": True})]))
            done.append(f"request {intent}: partly undone; "
                        f"{sum(map(len, left.values()))} instance(s) left for later")
        else:
            store.commit(Txn(guard, [Delete(store.keys.zone_intent(intent))]))
            done.append(f"request {intent}: undone in {', '.join(sorted(message['zones']))}")
    for line in done:
        LOG.warning("%s", line)
    return done
