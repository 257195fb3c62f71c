"""The driver interface: what a compute host needs from a hypervisor.

Drivers run inside the worker processes of the compute daemon (never in the
main process, which owns the etcd connection). Every operation is keyed by
the instance uuid and idempotent, so a job repeated after a daemon restart
never builds twice: `build` of an instance that already exists returns its
result, `destroy` of one that is gone does nothing.
"""

from __future__ import annotations

import abc
from typing import Any


class Driver(abc.ABC):
    """One hypervisor. `config` is the whole validated compute configuration."""

    name: str = "base"

    def __init__(self, config: dict[str, Any]):
        self.config = config

    @abc.abstractmethod
    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Create and start the instance described by `spec` (an instance_spec message).

        Returns `{"ip": str | None}`. Raises BuildError with a one-line reason;
        on failure the driver removes whatever it created.
        """

    @abc.abstractmethod
    def destroy(self, uuid: str) -> None:
        """Stop and remove the instance and everything it owns (domain, disks, files)."""

    @abc.abstractmethod
    def list_instances(self) -> set[str]:
        """Uuids of instances this driver currently holds (for reconciliation)."""

    @abc.abstractmethod
    def running(self) -> set[str]:
        """Uuids of instances of ours whose guest runs now."""

    @abc.abstractmethod
    def power_off(self, uuid: str) -> bool:
        """Stop the guest at once (a hard power-off), keeping its definition and disk;
        False if it was not running."""

    @abc.abstractmethod
    def power_on(self, uuid: str) -> bool:
        """Start a stopped guest again; False if it was running already."""

    def fence(self) -> list[str]:
        """Power off every guest of ours (the host lost its lease: another host may soon
        run them); the uuids stopped."""
        stopped = []
        for uuid in sorted(self.running()):
            if self.power_off(uuid):
                stopped.append(uuid)
        return stopped

    def console(self, uuid: str, max_bytes: int = 65536) -> str:
        """The tail of the instance's serial console log."""
        return ""

    def check(self) -> str:
        """Raise ServiceUnavailable if the hypervisor is unusable; else describe it."""
        return self.name

    def close(self) -> None:
        """Release connections (called when a worker exits)."""
        return None

