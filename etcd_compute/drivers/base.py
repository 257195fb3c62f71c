"""The driver interface: what a compute host needs from a hypervisor.

Drivers run inside the worker processes of the compute daemon (never in the
main process, which owns the etcd connection). Every operation is keyed by
the instance uuid and idempotent, so a job repeated after a daemon restart
never builds twice: `build` of an instance that already exists returns its
result, `destroy` of one that is gone does nothing. The lifecycle operations
(stop, start, reboot, rebuild, resize) may be run again after a restart cut
them short: each one either completes or leaves the instance as it was (its
size, its disk), powered as asked.

A `PowerWatch` (libvirt only) runs in the daemon's main process and reports
guests that start or stop, from the hypervisor's own events.
"""

from __future__ import annotations

import abc
import socket
from collections.abc import Callable
from typing import Any

from etcd_compute.errors import BuildError, RequestError

# uuid, running now, why (one line), crashed, when it was observed (time.monotonic()).
PowerReport = Callable[[str, bool, str, bool, float], None]


class Driver(abc.ABC):
    """One hypervisor. `config` is the whole validated compute configuration."""

    name: str = "base"

    def __init__(self, config: dict[str, Any]):
        self.config = config

    @abc.abstractmethod
    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Create and start the instance described by `spec` (an instance_spec message);
        left powered off when `spec["stopped"]`.

        Returns `{"ip": str | None}`. Raises BuildError with a one-line reason;
        on failure the driver removes whatever it created.
        """

    def prefetch(self, spec: dict[str, Any]) -> None:
        """Fetch into a cache what building `spec` will need (its image), defining nothing
        of the guest: run while the host checks the claim, before `build` may run. Errors
        are the build's to report (it fetches again)."""
        return None

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

    # -- an operator's actions: BuildError (RequestError: the request's fault) on failure

    @abc.abstractmethod
    def stop(self, uuid: str) -> None:
        """Power the guest off: asked first (ACPI), then hard after a timeout."""

    @abc.abstractmethod
    def start(self, uuid: str) -> dict[str, Any]:
        """Power the guest on; `{"ip": ...}` as far as known now."""

    @abc.abstractmethod
    def suspend(self, uuid: str) -> None:
        """Stop the guest keeping its memory on this host's disk (Nova's suspend); done
        already if it was suspended."""

    @abc.abstractmethod
    def resume(self, uuid: str) -> dict[str, Any]:
        """Run the suspended guest again from the memory `suspend` kept; `{"ip": ...}`."""

    @abc.abstractmethod
    def pause(self, uuid: str) -> None:
        """Freeze the running guest, its memory kept in this host's RAM (Nova's pause,
        libvirt's suspend of the domain); done already if it was paused."""

    @abc.abstractmethod
    def unpause(self, uuid: str) -> dict[str, Any]:
        """Run the paused guest on from where `pause` froze it; `{"ip": ...}`. Done already
        if it runs; BuildError if it is not running at all (its memory is gone)."""

    @abc.abstractmethod
    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        """Restart the guest: soft (asked, then hard after the timeout) or hard at once;
        a paused guest, which cannot answer, hard."""

    @abc.abstractmethod
    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        """A fresh disk from `spec["image"]`, same identity (uuid, MAC, config drive data);
        the old disk is kept until the new one is ready (a refused image changes nothing)."""

    @abc.abstractmethod
    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        """The guest at `spec["resources"]` (restarted when `power_on`); on failure it is
        left at its old size, powered as asked."""

    @abc.abstractmethod
    def snapshot(self, spec: dict[str, Any], image_id: str, running: bool) -> dict[str, Any]:
        """The instance's disk, flattened, uploaded into the queued Glance image `image_id`
        (live and crash-consistent when the guest runs; it keeps running). On failure the
        image is deleted and the guest is as it was. Returns {"detail": what was made}."""

    @abc.abstractmethod
    def set_security_groups(self, spec: dict[str, Any], groups: list[str]) -> None:
        """The guest's network interface filtered for `groups` (its definition and, if it
        runs, the running guest at once); nothing to do for a guest without a network."""

    def attach_interface(self, uuid: str, vif: dict[str, Any]) -> None:
        """The NIC of `vif` (a Neutron port: port_id, mac, mtu, bridge) plugged into the
        guest: the running guest at once and its definition; plugged already: nothing."""
        raise RequestError(f"{type(self).__name__} cannot plug a port into a guest")

    def detach_interface(self, uuid: str, port_id: str) -> None:
        """The NIC of Neutron port `port_id` unplugged from the guest (running and
        defined); not plugged: nothing."""
        raise RequestError(f"{type(self).__name__} cannot unplug a port from a guest")

    # -- moving a guest to another host (docs/explanation/moves.md): BuildError on failure

    def prepare_incoming(self, spec: dict[str, Any]) -> dict[str, Any]:
        """Make room here for the guest of `spec` coming from another host; what its
        source needs to send it (the driver's "target")."""
        raise BuildError(f"the {self.name} driver cannot move guests")

    def discard_incoming(self, uuid: str) -> None:
        """Remove what `prepare_incoming` made, the move being off (never a running guest)."""
        raise BuildError(f"the {self.name} driver cannot move guests")

    def live_migrate(self, uuid: str, target: dict[str, Any],
                     progress: Callable[[dict[str, Any]], None] | None = None,
                     cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        """Move the running guest to `target` without stopping it; nothing of it is left
        here after. On failure or cancel it runs on here as before. Returns figures
        (seconds, downtime_ms, bytes)."""
        raise BuildError(f"the {self.name} driver cannot move guests")

    def abort_migration(self, uuid: str) -> bool:
        """Cancel the guest's outgoing live migration; False if none runs."""
        return False

    def migration_progress(self, uuid: str) -> dict[str, Any] | None:
        """The outgoing migration's progress (elapsed_ms, data_*, percent); None if none."""
        return None

    def send_stopped(self, uuid: str, target: dict[str, Any]) -> dict[str, Any]:
        """Shut the guest down and send its disk, config drive and console to `target`;
        it stays here, stopped, until confirmed (`destroy`) or reverted (`power_on`).
        Returns what `finish_incoming` checks there."""
        raise BuildError(f"the {self.name} driver cannot move guests")

    def finish_incoming(self, spec: dict[str, Any], moved: dict[str, Any],
                        power_on: bool) -> dict[str, Any]:
        """Define (and start, if `power_on`) the guest `send_stopped` sent; `{"ip": ...}`."""
        raise BuildError(f"the {self.name} driver cannot move guests")

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

    def diagnostics(self, uuid: str) -> dict[str, Any] | None:
        """The guest's figures in Nova's diagnostics shape (2.48: state, driver, uptime,
        cpu/memory/disk/nic details); None when this driver has none or no such guest."""
        return None

    def check(self) -> str:
        """Raise ServiceUnavailable if the hypervisor is unusable; else describe it."""
        return self.name

    def close(self) -> None:
        """Release connections (called when a worker exits)."""
        return None



class Screens(abc.ABC):
    """The guests' screens on this host, for the console relay (the compute's main
    process): a guest's VNC as a connected socket, never an address anyone could reach."""

    @abc.abstractmethod
    def open(self, uuid: str) -> socket.socket | None:
        """A socket carrying the running guest `uuid`'s screen (RFB), or None: no such
        guest of ours running here."""

    def close(self) -> None:
        return None


class PowerWatch(abc.ABC):
    """Guests starting and stopping, as the hypervisor reports them (a thread of its own)."""

    @abc.abstractmethod
    def start(self, report: PowerReport) -> None:
        """Call `report` (from the watch's thread) for every guest of ours that starts or
        stops, and for every `check`."""

    @abc.abstractmethod
    def check(self, uuid: str | None = None) -> None:
        """Report the power state of `uuid` (None: of every guest of ours) soon."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop watching."""
