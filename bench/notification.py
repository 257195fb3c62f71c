"""Notification latency: the scheduler's etcd write to the compute's receipt.

Measured without touching the daemon: the spec carries `requested_at`
(time.time() as the scheduler builds its etcd transaction; the SCHEDULED
record copies it into `created_at`), and the compute's first act on receipt
is the transaction that moves the record to BUILDING with a fresh
`updated_at`. So `BUILDING.updated_at - created_at` is write -> watch
event -> daemon's queue -> decode + one etcd read of the record. Both
clocks are this machine's. The BUILDING versions are read back afterwards
by replaying etcd's history of the records (/hosts/<rp>/instances/) from the
variant's start.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from etcd_compute.etcd import Store
from etcd_compute.keys import RECORDS

REPLAY_TIMEOUT = 60.0


def current_revision(store: Store) -> int:
    _, revision = store.get_prefix(store.keys.locations(), keys_only=True)
    return revision


def _is_record(store: Store, key: bytes | str) -> bool:
    parsed = store.keys.parse_host_key(key.decode() if isinstance(key, bytes) else key)
    return parsed is not None and parsed.kind == RECORDS


def building_delays(store: Store, start_revision: int) -> dict[str, float]:
    """{instance uuid: seconds from requested_at to its BUILDING record}, for the
    records written after `start_revision`."""
    return {uuid: building - created
            for uuid, (created, building) in building_times(store, start_revision).items()}


def building_times(store: Store, start_revision: int) -> dict[str, tuple[float, float]]:
    """{instance uuid: (requested_at, its BUILDING record's updated_at)}, for the
    records written after `start_revision`."""
    entries, _ = store.get_prefix(store.keys.hosts(), keys_only=True)
    entries = [entry for entry in entries if _is_record(store, entry.key)]
    if not entries:
        return {}
    end = max(entry.mod_revision for entry in entries)
    responses, cancel = store.client.watch_prefix_response(
        store.keys.hosts(), start_revision=start_revision + 1)
    timer = threading.Timer(REPLAY_TIMEOUT, cancel)
    timer.start()
    delays: dict[str, tuple[float, float]] = {}
    try:
        for response in responses:
            last = 0
            for event in response.events:
                last = max(last, event.mod_revision)
                if not _is_record(store, event.key):
                    continue
                value: dict[str, Any] = json.loads(event.value) if event.value else {}
                uuid = value.get("uuid")
                if value.get("state") == "BUILDING" and uuid and uuid not in delays:
                    delays[uuid] = (value["created_at"], value["updated_at"])
            if last >= end:
                break
    finally:
        timer.cancel()
        cancel()
    return delays
