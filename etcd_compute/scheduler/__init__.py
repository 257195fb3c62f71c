"""The scheduler library: `select_destinations` and `update_resource_stats`.

Nova's scheduler-lib seam, for this project: other Python code (the CLI,
benchmarks, a future API) schedules through these two calls only.

    from etcd_compute.scheduler import RequestSpec, Scheduler
    scheduler = Scheduler(load_schedule("schedule.yaml"))
    destinations = scheduler.select_destinations(
        RequestSpec.build("resources=VCPU:1,MEMORY_MB:512", count=3))

The placement engine only. Modules: `request` parses the query, `spec` holds
RequestSpec/Destination, `hoststate` and `context` are what the planner knows
of each host, `filters`/`weighers` are the policies, `planner` picks hosts,
`candidates` keeps Placement's answers per request shape, `spec_writer` writes
the specs, `explain` says why nothing fits, `queue` is the scheduler service's
messages (both sides), `scheduler` ties one request together. The daemon that
runs the service is `etcd_compute.controller`; the operator's instance
commands are `etcd_compute.ops`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from etcd_compute.scheduler.request import parse_query
    from etcd_compute.scheduler.scheduler import (
        Scheduler,
        select_destinations,
        update_resource_stats,
    )
    from etcd_compute.scheduler.spec import Destination, RequestSpec

# Imported when first used (PEP 562): schedule.py's queue path needs neither the
# Placement client nor the planner, and a short-lived command pays for every import.
_HOMES = {"parse_query": "request", "Scheduler": "scheduler",
          "select_destinations": "scheduler", "update_resource_stats": "scheduler",
          "Destination": "spec", "RequestSpec": "spec"}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = ["Destination", "RequestSpec", "Scheduler", "parse_query", "select_destinations",
           "update_resource_stats"]
