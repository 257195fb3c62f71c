"""The baseline: the original toy's placement algorithm, as faithfully as we can.

For each instance: `GET /allocation_candidates` with no limit (every provider
that fits comes back), claim the first candidate with `PUT /allocations`,
write the spec to `/hosts/<rp>/<uuid>`. No filters, no weighing, no batching.
A 409 (another process took the capacity, or the provider generation moved)
re-reads the candidates and tries again, a bounded number of times.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import Any

from bench.placements import Placed, RunResult
from etcd_compute import messages
from etcd_compute.errors import ConflictError
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient

MAX_TRIES = 100


def instance_spec(uuid: str, host: str, resources: dict[str, int],
                  allocations: dict[str, Any], project_id: str, user_id: str) -> dict[str, Any]:
    return {
        "action": "build", "uuid": uuid, "name": f"baseline-{uuid[:8]}", "host": host,
        "resources": resources, "allocations": allocations,
        "image": {"url": "file:///dev/null", "sha256": None},
        "project_id": project_id, "user_id": user_id, "requested_at": time.time(),
    }


def place_one(placement: PlacementClient, store: Store, query: str,
              resources: dict[str, int], project_id: str, user_id: str,
              result: RunResult) -> None:
    uuid = str(uuidlib.uuid4())
    started = time.perf_counter()
    for _ in range(MAX_TRIES):
        candidates = placement.allocation_candidates(query)
        requests = candidates["allocation_requests"]
        if not requests:
            result.errors.append(f"{uuid}: no candidates")
            return
        allocations = requests[0]["allocations"]
        try:
            placement.claim(uuid, allocations, project_id, user_id)
        except ConflictError:
            result.conflicts += 1
            result.retries += 1
            continue
        host = next(iter(allocations))
        spec = instance_spec(uuid, host, resources, allocations, project_id, user_id)
        store.put(messages.INSTANCE_SPEC, store.keys.spec(host, uuid), spec)
        result.latencies.append(time.perf_counter() - started)
        result.placed.append(Placed(uuid, host, allocations))
        return
    result.errors.append(f"{uuid}: still conflicting after {MAX_TRIES} tries")


def run(config: dict[str, Any], count: int, query: str) -> RunResult:
    """Place `count` instances one by one the baseline way, in this process."""
    placement = PlacementClient(config["placement"])
    store = Store(config["etcd"])
    resources = {rc: int(n) for rc, n in
                 (pair.split(":") for pair in query.removeprefix("resources=").split(","))}
    ids = config["scheduler"]["project_id"], config["scheduler"]["user_id"]
    result = RunResult()
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        for _ in range(count):
            place_one(placement, store, query, resources, *ids, result)
    finally:
        result.cpu_seconds = time.process_time() - cpu
        result.wall_seconds = time.perf_counter() - wall
        store.close()
    return result
