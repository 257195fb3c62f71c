"""What other services tell the compute API about a server, handed to its host:
`/hosts/<rp>/external-events/<uuid>` (message `external_events`).

Nova's API casts each event to the server's compute, which gives it to whoever waits for
that name and tag (a build waiting for its ports' `network-vif-plugged`) or drops it. Here
the API appends the events to the instance's key under its host's prefix (`hand_to_host`),
and the host reads the key when it starts waiting and gets every later change from its
watch (`compute/plugging.py`): an event that came before the wait counts as one after it.

What keeps this bounded whatever a caller sends: one key per instance a host holds (an
event for a server without a host is refused before), the last MAX_EVENTS events in it,
written with a lease (TTL_SECONDS: an event nobody waits for goes), and the host removes
the key with the instance's other keys (`ownership.host_keys`).
"""

from __future__ import annotations

from typing import Any

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import Compare, KeyValueStore, Txn, absent, put_message

# The schema's maxItems: a flood of events for one server keeps only the last of them.
MAX_EVENTS = 32
# How long an event lives at most (3/4 of it at least: one shared lease, `SharedLease`);
# longer than any build waits for one (`vif_plugging_timeout` is at most an hour).
TTL_SECONDS = 3600
VIF_PLUGGED = "network-vif-plugged"
COMPLETED, FAILED = "completed", "failed"
# Tries of the append against other writers of the same key before giving up.
TRIES = 10

Events = list[dict[str, Any]]


def decode(uuid: str, value: bytes) -> Events:
    """The events of an instance's key; none from one unreadable or of another instance."""
    try:
        message = messages.decode(messages.EXTERNAL_EVENTS, value)
    except InvalidMessage:
        return []
    return list(message["events"]) if message["uuid"] == uuid else []


def read(store: KeyValueStore, host: str, uuid: str) -> Events:
    entry = store.get(store.keys.external_events(host, uuid))
    return [] if entry is None else decode(uuid, entry.value)


def hand_to_host(store: KeyValueStore, host: str, uuid: str, events: Events,
                 lease: int) -> bool:
    """Append `events` to the instance's key on `host`, while its record is there (never a
    key for an instance gone); the last MAX_EVENTS kept. False if it could not be written
    (the record is gone, or other writers of the key won every try)."""
    keys = store.keys
    key, record = keys.external_events(host, uuid), keys.record(host, uuid)
    for _ in range(TRIES):
        entry = store.get(key)
        kept = [] if entry is None else decode(uuid, entry.value)
        message = {"uuid": uuid, "events": (kept + events)[-MAX_EVENTS:]}
        compare = [Compare(key, "mod", "==", entry.mod_revision) if entry else absent(key)]
        written = store.commit(Txn(
            [*compare, Compare(record, "version", ">", 0)],
            [put_message(messages.EXTERNAL_EVENTS, key, message, lease)]))
        if written is not None:
            return True
        if store.get(record) is None:
            return False
    return False


def vif_plugged(events: Events, ports: list[str]) -> tuple[set[str], set[str]]:
    """(ports Neutron said are plugged, ports it said failed) of `ports`: the
    `network-vif-plugged` events tagged with their ids (Nova's tag is the port id), the
    last word about a port counting."""
    plugged: set[str] = set()
    failed: set[str] = set()
    for event in events:
        port = event.get("tag")
        if event["name"] != VIF_PLUGGED or port not in ports:
            continue
        if event["status"] == COMPLETED:
            plugged.add(port)
            failed.discard(port)
        elif event["status"] == FAILED:
            failed.add(port)
            plugged.discard(port)
    return plugged, failed
