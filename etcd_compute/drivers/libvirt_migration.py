"""Moving a guest between two hosts' libvirtds (the libvirt driver's part of issue 21): the
destination made ready, and a live move. The cold move builds on it
(`libvirt_cold_move.py`).

Both ways start on the destination, which makes room as for a build (the
instance's directory, an empty overlay on the same base image fetched through
its own cache, meta.json, network and filters) and answers with a `Target`.
A live move (`live_migrate`, on the source) sends the config drive first
(`remote_files`, over the peer's libvirtd) and reserves the guest's address for
its MAC in the destination's network (the guest keeps it: it does not know it
moved), then libvirt migrates peer to peer over TLS, the overlay's data copied
along (`virt/migration.py`); the destination runs the guest with the same
definition (MAC, devices), its files at its paths, its filter bound to that
address. After the switch the source's earlier console goes to the destination's
`console.history.log` and nothing of the guest is left here. Cancelled
(`abort_migration`) or failed, the guest runs on here as before, and the
reservation there is dropped.
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt

from etcd_compute.drivers.libvirt_events import ensure_event_loop
from etcd_compute.drivers.libvirt_host import LibvirtHost
from etcd_compute.errors import BuildError
from etcd_compute.virt import disks, network, nwfilter
from etcd_compute.virt.domain import mac_addresses
from etcd_compute.virt.instance_files import CONSOLE_HISTORY_BYTES, InstanceFiles, instance_meta
from etcd_compute.virt.migration import (
    LIVE_FLAGS,
    Limits,
    Supervisor,
    Target,
    destination_xml,
    local_disks,
    migration_params,
    peer_uri,
    progress_of,
)
from etcd_compute.virt.remote_files import send_files

log = logging.getLogger(__name__)

# The supervisor's connection: libvirtd silent for 5 s x (3 + 1) closes it.
KEEPALIVE_SECONDS, KEEPALIVE_COUNT = 5, 3


def one_line(exc: BaseException) -> str:
    text = exc.get_error_message() if isinstance(exc, libvirt.libvirtError) else str(exc)
    return ((text or "").splitlines() or [type(exc).__name__])[0][:500]


class LibvirtMigrations(LibvirtHost):
    """The destination made ready, and a live move (the cold move and LibvirtDriver build
    on it)."""

    # -- the destination ---------------------------------------------------------------

    def prepare_incoming(self, spec: dict[str, Any]) -> dict[str, Any]:
        uuid = spec["uuid"]
        address = self._migration_settings()["address"]
        if self._our_domain(uuid) is not None:
            raise BuildError(f"instance {uuid} already has a domain on this host")
        files = InstanceFiles.of(self.instances_dir, uuid)
        files.remove()
        files.create()
        try:
            image = spec.get("image") or {"url": self.settings["default_image"], "sha256": None}
            self._create_disk(image, int(spec["resources"]["DISK_GB"]), files.disk,
                              self.is_test_driver)
            files.write_meta(instance_meta(spec))
            on_ports = spec.get("vifs") is not None  # Neutron's: no libvirt network here
            if not self.is_test_driver and not on_ports:
                self._ensure_network()
                self._ensure_filters()
            gateway = nwfilter.gateway_of(self.settings["network_cidr"])
            target = Target(address, str(files.directory), self._base_sha256(files.disk),
                            None if on_ports else gateway,
                            None if self.is_test_driver or on_ports else self.settings["network"])
        except BaseException:
            files.remove()
            raise
        log.info("instance %s: ready to come in at %s", uuid, address)
        return target.to_dict()

    def discard_incoming(self, uuid: str) -> None:
        """What `prepare_incoming` (or a cut-short copy) left, once the move is off. A guest
        that runs here is never discarded: the move happened after all."""
        domain = self._our_domain(uuid)
        if domain is not None and domain.isActive():
            raise BuildError(f"instance {uuid} runs on this host: not discarded")
        if domain is not None:
            domain.undefine()
        InstanceFiles.of(self.instances_dir, uuid).remove()

    # -- the source --------------------------------------------------------------------

    def live_migrate(self, uuid: str, target_data: dict[str, Any],
                     progress: Callable[[dict[str, Any]], None] | None = None,
                     cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        try:
            target = Target.from_dict(target_data)
        except (ValueError, TypeError) as exc:
            raise BuildError(f"live migration: bad target: {exc}") from None
        domain = self._domain(uuid)
        if not domain.isActive():
            raise BuildError("live migration: the guest is not running (move it cold)")
        files = InstanceFiles.of(self.instances_dir, uuid)
        self._check_same_base(files.disk, target)
        address = self._guest_address(domain)
        peer = self._open_peer(target)
        started = time.monotonic()
        try:
            moved = False
            try:
                self._bring_address(peer, target, address)
                watch, failure = self._migrate(domain, peer, target, files, address, progress,
                                               cancelled)
                moved = failure is None or self._moved_anyway(domain, peer, uuid, watch)
            finally:
                if not moved:
                    _drop_address(peer, target.network, address)
            if not moved:
                why = watch.aborted or one_line(failure)  # type: ignore[arg-type]
                raise BuildError(f"live migration to {target.address}: {why}; the guest runs "
                                 "on here")
            # Moved: what follows is best effort, the guest runs there whatever happens.
            result = {"seconds": round(time.monotonic() - started, 3),
                      "paused_after_seconds": watch.paused_at, **watch.last,
                      **_completed(peer, uuid)}
            if watch.paused_at is not None:
                _resume_there(peer, uuid)
            self._send_history(peer, target, files, uuid)
        finally:
            close_quietly(peer)
        if address is not None:
            _drop_address(self.connection, self.settings["network"], address)
        files.remove()
        log.info("instance %s: moved live to %s in %.1fs (downtime %s ms)", uuid,
                 target.address, result["seconds"], result.get("downtime_ms"))
        return result

    def _migrate(self, domain: libvirt.virDomain, peer: libvirt.virConnect, target: Target,
                 files: InstanceFiles, address: tuple[str, str] | None,
                 progress: Callable[[dict[str, Any]], None] | None,
                 cancelled: Callable[[], bool] | None
                 ) -> tuple[Supervisor, libvirt.libvirtError | None]:
        """The config drive sent, then the migration watched; how it ended (None: moved)."""
        try:
            send_files(peer, Path(target.instance_dir), {"config.iso": files.config_drive},
                       pool_name=domain.name())
            xml = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE)
        except (libvirt.libvirtError, OSError) as exc:
            raise BuildError(f"live migration to {target.address}: {one_line(exc)}; the guest "
                             "runs on here") from None
        # What runs there is bound to the guest's address; what stays defined learns it
        # again from DHCP at its next boot (the reservation gives it the same one).
        running = destination_xml(xml, files.directory, target, address and address[1])
        defined = destination_xml(xml, files.directory, target)
        limits = Limits.from_settings(self._migration_settings())
        copied = local_disks(xml)
        _allow_downtime(domain, limits)
        watching, watched = self._watched(domain)
        try:
            with Supervisor(watched, limits, progress, cancelled or (lambda: False),
                            data_total=_data_to_copy(domain, copied),
                            last_resort=lambda: _end_incoming(peer, domain.UUIDString())
                            ) as watch:
                try:
                    domain.migrateToURI3(
                        self._peer_uri(target),
                        migration_params(target, running, copied, limits, defined),
                        LIVE_FLAGS)
                except libvirt.libvirtError as exc:
                    return watch, exc
            return watch, None
        finally:
            if watching is not None:
                close_quietly(watching)

    def _watched(self, domain: libvirt.virDomain
                 ) -> tuple[libvirt.virConnect | None, libvirt.virDomain]:
        """The guest as the supervisor sees it: on a connection of its own, with a
        keepalive. On the migration's connection libvirt's client (9.0) can leave the
        supervisor's call unsent until migrateToURI3 returns (the wake-up of the thread
        polling the socket for the migration's reply is lost): no progress, no bound, no
        cancel. The keepalive (libvirt's event loop runs in a thread of ours) closes the
        connection, failing its calls, when libvirtd stops answering, and its pings wake a
        poll that lost its wake-up among the supervisor's own calls."""
        ensure_event_loop()
        uri = self.settings["uri"]
        try:
            connection = libvirt.open(uri)
        except libvirt.libvirtError as exc:
            raise BuildError(f"live migration: libvirt {uri}: {one_line(exc)}; the guest runs "
                             "on here") from None
        try:
            connection.setKeepAlive(KEEPALIVE_SECONDS, KEEPALIVE_COUNT)
        except libvirt.libvirtError as exc:
            log.debug("no keepalive on %s: %s", uri, one_line(exc))  # the test driver
        try:
            return connection, connection.lookupByUUIDString(domain.UUIDString())
        except libvirt.libvirtError as exc:
            close_quietly(connection)
            raise BuildError(f"live migration: {one_line(exc)}; the guest runs on "
                             "here") from None

    def abort_migration(self, uuid: str) -> bool:
        """Cancel the guest's outgoing migration; False if none is running."""
        domain = self._our_domain(uuid)
        if domain is None:
            return False
        try:
            domain.abortJob()
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_OPERATION_INVALID:  # no job
                return False
            raise
        return True

    def migration_progress(self, uuid: str) -> dict[str, Any] | None:
        domain = self._our_domain(uuid)
        if domain is None:
            return None
        stats = domain.jobStats()
        if stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) == libvirt.VIR_DOMAIN_JOB_NONE:
            return None
        return progress_of(stats)

    # -- helpers -------------------------------------------------------------------------

    def _migration_settings(self) -> dict[str, Any]:
        settings = self.settings.get("migration") or {}
        if not settings.get("address"):
            raise BuildError("this host takes no migrations: driver.libvirt.migration.address "
                             "is not set")
        return settings

    def _peer_uri(self, target: Target) -> str:
        return peer_uri(target.address, self._migration_settings()["pki_dir"])

    def _open_peer(self, target: Target) -> libvirt.virConnect:
        uri = self._peer_uri(target)
        try:
            return libvirt.open(uri)
        except libvirt.libvirtError as exc:
            raise BuildError(f"libvirtd of {target.address}: {one_line(exc)}") from None

    def _base_sha256(self, overlay: Path) -> str | None:
        base = disks.backing_file(overlay)
        if base is None:
            return None
        record = self.images.record_of(base)
        if record is None:
            raise BuildError(f"{overlay.name}: its base {base} is not in the image cache")
        return str(record["sha256"])

    def _base_of_image(self, spec: dict[str, Any]) -> tuple[Path, str] | None:
        image = spec.get("image") or {}
        base = self.images.base_path(image.get("url") or self.settings["default_image"],
                                     image.get("glance"))
        record = self.images.record_of(base)
        return (base, str(record["sha256"])) if record else None

    def _check_same_base(self, overlay: Path, target: Target) -> None:
        own = self._base_sha256(overlay)
        if own != target.base_sha256:
            raise BuildError("the destination's base image differs from this guest's "
                             f"(sha256 {str(own)[:12]} here, {str(target.base_sha256)[:12]} "
                             "there): its URL serves other bytes now")

    def _moved_anyway(self, domain: libvirt.virDomain, peer: libvirt.virConnect, uuid: str,
                      watch: Supervisor) -> bool:
        """After a failed migration: exactly one copy runs, and which. The source's, as a
        rule (a copy the destination may have started is destroyed there); the
        destination's only if the source's is gone and that one runs."""
        here = _active(domain)
        try:
            if here and watch.paused_at is not None and \
                    domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
                domain.resume()  # we paused it to finish: it runs on as before
            there = peer.lookupByUUIDString(uuid)
        except libvirt.libvirtError:
            return False  # none there (the rule), or the destination is gone
        if not _active(there):
            return False
        if not here:
            log.warning("instance %s: the migration reported failure, but the guest runs "
                        "on the destination only: moved", uuid)
            return True
        log.warning("instance %s: destroying the destination's copy", uuid)
        try:
            there.destroy()
        except libvirt.libvirtError as exc:
            log.error("instance %s: the destination's copy not destroyed: %s (its compute "
                      "destroys it: the instance is not its)", uuid, one_line(exc))
        return False

    def _guest_address(self, domain: libvirt.virDomain) -> tuple[str, str] | None:
        """(MAC, address) of the guest on our network: its lease here, else the address
        reserved for it here (it came from another host and has not renewed yet)."""
        if self.is_test_driver:
            return None
        macs = mac_addresses(domain, self.settings["network"])
        if not macs:
            return None
        net = self.connection.networkLookupByName(self.settings["network"])
        address = network.lease_ip(net, macs[0]) or network.reservations(net).get(macs[0])
        return (macs[0], address) if address else None

    def _bring_address(self, peer: libvirt.virConnect, target: Target,
                       address: tuple[str, str] | None) -> None:
        """Reserve the guest's address for its MAC in the destination's network; refused if
        another guest holds it there (every host's network has the same range)."""
        if address is None or target.network is None:
            return
        mac, ip = address
        try:
            net = peer.networkLookupByName(target.network)
            holder = network.holder_of(net, ip)
            if holder not in (None, mac):
                raise BuildError(f"live migration to {target.address}: the guest's address "
                                 f"{ip} is another guest's there; the guest runs on here")
            network.reserve(net, mac, ip)
        except libvirt.libvirtError as exc:
            raise BuildError(f"live migration to {target.address}: network {target.network}: "
                             f"{one_line(exc)}; the guest runs on here") from None

    def _release_addresses(self, domain: libvirt.virDomain) -> None:
        """The guest leaves (destroyed, or moved away): its reservations here go."""
        if self.is_test_driver:
            return
        try:
            macs = mac_addresses(domain, self.settings["network"])
        except libvirt.libvirtError:
            return  # gone meanwhile
        for mac in macs:
            _drop_address(self.connection, self.settings["network"], (mac, ""))

    def _send_history(self, peer: libvirt.virConnect, target: Target, files: InstanceFiles,
                      uuid: str) -> None:
        """The console so far (here and before) to the destination's history, best effort:
        the guest has moved whatever happens here."""
        try:
            with tempfile.TemporaryDirectory(prefix="console-") as scratch:
                history = Path(scratch) / "console.history.log"
                history.write_bytes(files.console_bytes(CONSOLE_HISTORY_BYTES))
                send_files(peer, Path(target.instance_dir),
                           {"console.history.log": history}, pool_name=uuid)
        except (libvirt.libvirtError, OSError) as exc:
            log.warning("instance %s: console history not sent: %s", uuid, one_line(exc))


def _allow_downtime(domain: libvirt.virDomain, limits: Limits) -> None:
    """The pause allowed at the switch, set before the migration starts (qemu keeps it for
    the migration; libvirt sets no other): a call during the job waits for the domain's
    job lock, and for qemu, with the bound's pause and abort behind it."""
    try:
        domain.migrateSetMaxDowntime(limits.max_downtime_ms, 0)
    except libvirt.libvirtError as exc:
        log.warning("instance %s: the downtime allowed not set (qemu's default holds): %s",
                    domain.name(), one_line(exc))


def _data_to_copy(domain: libvirt.virDomain, disks: list[str]) -> int:
    """The guest's memory and its local disks' data, in bytes: what the bound is sized by
    before libvirt's job tells (0, the bound's floor, if libvirt does not say)."""
    try:
        total = int(domain.info()[1]) * 1024  # KiB
        for disk in disks:
            total += int(domain.blockInfo(disk)[1])  # allocated
    except libvirt.libvirtError as exc:
        log.debug("instance %s: the data to copy unknown: %s", domain.name(), one_line(exc))
        return 0
    return total


def _end_incoming(peer: libvirt.virConnect, uuid: str) -> None:
    """The last resort for a move cancelled on the source that goes on: the destination's
    copy is destroyed while it still waits for the guest (paused for the incoming
    migration: the destination has not taken over), which fails the migration and leaves
    the guest here, as libvirt does when a destination fails before its finish. A copy in
    any other state may be the guest after the switch: left alone."""
    there = peer.lookupByUUIDString(uuid)
    state, reason = there.state()
    if (state, reason) != (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_MIGRATION):
        log.error("instance %s: the destination's copy is not waiting for the guest (state "
                  "%s, reason %s): left alone", uuid, state, reason)
        return
    log.error("instance %s: destroying the destination's incoming copy", uuid)
    there.destroy()


def _active(domain: libvirt.virDomain) -> bool:
    try:
        return bool(domain.isActive())
    except libvirt.libvirtError:
        return False


def _resume_there(peer: libvirt.virConnect, uuid: str) -> None:
    """A guest paused to finish its migration arrives paused: it runs again there."""
    try:
        there = peer.lookupByUUIDString(uuid)
        if there.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
            there.resume()
    except libvirt.libvirtError as exc:
        log.warning("instance %s: paused to finish its migration, not resumed on the "
                    "destination: %s", uuid, one_line(exc))


def _drop_address(connection: libvirt.virConnect, network_name: str | None,
                  address: tuple[str, str] | None) -> None:
    """Release a MAC's reservation on a network, best effort (logged)."""
    if address is None or network_name is None:
        return
    try:
        network.release(connection.networkLookupByName(network_name), address[0])
    except libvirt.libvirtError as exc:
        log.warning("network %s: reservation of %s not released: %s", network_name,
                    address[0], one_line(exc))


def _completed(peer: libvirt.virConnect, uuid: str) -> dict[str, Any]:
    """The finished job as the destination measured it: downtime, bytes, time."""
    try:
        stats = peer.lookupByUUIDString(uuid).jobStats(libvirt.VIR_DOMAIN_JOB_STATS_COMPLETED)
    except libvirt.libvirtError:
        return {}
    return {"downtime_ms": stats.get("downtime"), "data_total": stats.get("data_total"),
            "data_processed": stats.get("data_processed"),
            "memory_iteration": stats.get("memory_iteration"),
            "elapsed_ms": stats.get("time_elapsed")}


def close_quietly(connection: libvirt.virConnect) -> None:
    try:
        connection.close()
    except libvirt.libvirtError:
        pass


