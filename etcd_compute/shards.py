"""Candidate shards: every compute host is in one of SHARDS Placement aggregates, so that a
scheduler can ask Placement about a random part of a large cluster instead of all of it.

Placement's `GET /allocation_candidates` costs about the same whatever its `limit` (it
computes every provider that fits, then trims): ~300 ms of Placement's CPU per request at
1000 providers. Asked with `member_of=in:<a few shards>`, it considers only those
providers (~60 ms for 100 of 1000, measured in bench/REPORT.md). The shard of a host is a
hash of its provider uuid; the aggregates' uuids are fixed, so computes (which join their
shard at registration, `compute/registration.py`) and schedulers agree without talking.
A sharded query that finds nothing is asked again of every host (`Scheduler.plan`), so a
shard never hides the only host that fits.
"""

from __future__ import annotations

import hashlib
import math
import random
import uuid as uuidlib

SHARDS = 16
_NAMESPACE = uuidlib.UUID("0f3c2d4e-8a51-4f6b-9c7d-2e1a5b3c4d6e")
AGGREGATES = [str(uuidlib.uuid5(_NAMESPACE, f"etcd-compute-shard-{i}")) for i in range(SHARDS)]


def shard_of(rp_uuid: str) -> int:
    return int(hashlib.sha256(rp_uuid.encode()).hexdigest()[:8], 16) % SHARDS


def aggregate_of(rp_uuid: str) -> str:
    """The shard aggregate the host `rp_uuid` joins."""
    return AGGREGATES[shard_of(rp_uuid)]


def pick(hosts: int, wanted: int, rng: random.Random) -> list[str] | None:
    """Aggregates of enough random shards to hold about `wanted` of `hosts` hosts, or None
    when that is every shard (ask about all hosts)."""
    if hosts <= 0:
        return None
    count = math.ceil(SHARDS * wanted / hosts)
    if count >= SHARDS:
        return None
    return sorted(rng.sample(AGGREGATES, count))
