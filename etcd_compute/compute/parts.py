"""What the instance machine lends the parts it owns, as a Protocol: they depend on it,
not on `machine.py` (which imports them), so imports go one way.

Its parts: `actions.py` (an operator's action taken up, run, ended) and `ends.py` (a
build's or destroy's end written).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from etcd_compute.compute.consoles import Consoles
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.pool import Job
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records
from etcd_compute.placement import PlacementClient


class Machine(Protocol):
    """What the instance machine (`compute/machine.py`) lends the parts it owns."""

    store: KeyValueStore
    placement: PlacementClient
    consoles: Consoles
    # This daemon's hosts by provider uuid, and its settings (the compute section).
    hosts: dict[str, HostIdentity]
    settings: dict[str, Any]
    stopping: threading.Event
    # Instances with a job in a worker, by uuid.
    jobs: dict[str, Job]

    def read(self, rp_uuid: str, uuid: str) -> records.RecordRead:
        """The instance's record on `rp_uuid` (an unreadable one logged)."""

    def reread_later(self, spec: dict[str, Any]) -> None:
        """Look at the instance's spec again from the main loop."""

    def submit(self, kind: str, spec: dict[str, Any], record_revision: int, *,
               task: dict[str, Any] | None = None) -> None:
        """Run a job for the instance in the worker pool."""
