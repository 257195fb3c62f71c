"""Placement's own floor: the same placements claimed with nothing else around them.

Takes the allocations a variant made, gives every instance a fresh consumer
uuid, and claims them straight into Placement: in batches with one atomic
`POST /allocations` (what `--count` does), and one `PUT /allocations/<c>`
each (what a one-per-call scheduler must do). No candidates query, no
planning, no etcd. Claims are removed again by the caller's wipe.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from bench.placements import Placed, RunResult
from etcd_compute.placement import PlacementClient


def claim_batches(config: dict[str, Any], placed: list[Placed], batch: int) -> RunResult:
    placement = PlacementClient(config["placement"])
    ids = config["scheduler"]["project_id"], config["scheduler"]["user_id"]
    result = RunResult()
    wall = time.perf_counter()
    for start in range(0, len(placed), batch):
        chunk = placed[start:start + batch]
        claims = {str(uuidlib.uuid4()): p.allocations for p in chunk}
        began = time.perf_counter()
        if len(claims) == 1:
            ((consumer, allocations),) = claims.items()
            placement.claim(consumer, allocations, *ids)
        else:
            placement.claim_many(claims, *ids)
        result.latencies += [time.perf_counter() - began] * len(chunk)
        result.placed += [Placed(c, p.host, p.allocations) for c, p in zip(claims, chunk,
                                                                            strict=True)]
    result.wall_seconds = time.perf_counter() - wall
    result.conflicts = placement.conflicts
    return result
