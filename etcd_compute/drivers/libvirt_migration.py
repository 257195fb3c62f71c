"""Moving a guest between two hosts' libvirtds (the libvirt driver's part of issue 21).

Both ways start on the destination, which makes room as for a build (the
instance's directory, an empty overlay on the same base image fetched through
its own cache, meta.json, network and filters) and answers with a `Target`:

- **live** (`live_migrate`, on the source): the config drive is sent first
  (`remote_files`, over the peer's libvirtd), then libvirt migrates peer to peer
  over TLS, the overlay's data copied along (`virt/migration.py`); the
  destination runs the guest with the same definition (MAC, devices), its files
  at its paths. After the switch the source's earlier console goes to the
  destination's `console.history.log` and nothing of the guest is left here.
  Cancelled (`abort_migration`) or failed, the guest runs on here as before.
- **cold** (`send_stopped` on the source, then `finish_incoming` on the
  destination): the guest is shut down, its overlay, config drive and console
  history are sent; the destination checks what arrived against the sizes and
  sha256s the source reports, points the overlay at its own copy of the base,
  and defines (and starts) the guest with the same MAC and identity. The source
  keeps its stopped guest until the move is confirmed (`destroy`) or reverted
  (`power_on`).
"""

from __future__ import annotations

import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt
from oslo_utils.imageutils import format_inspector

from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import disks, nwfilter, qemu_img
from etcd_compute.virt.domain import DomainSpec, choose_domain_type, domain_xml, mac_addresses
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
from etcd_compute.virt.remote_files import check_received, send_files

log = logging.getLogger(__name__)

# The files of a stopped guest that travel (the overlay, the config drive), by name.
COLD_FILES = ("disk.qcow2", "config.iso")


def _line(exc: BaseException) -> str:
    text = exc.get_error_message() if isinstance(exc, libvirt.libvirtError) else str(exc)
    return ((text or "").splitlines() or [type(exc).__name__])[0][:500]


class LibvirtMigrations:
    """Mixed into LibvirtDriver: uses its connection, settings, image cache and helpers."""

    settings: dict[str, Any]
    instances_dir: Path
    images: Any
    connection: libvirt.virConnect
    is_test_driver: bool
    _our_domain: Callable[[str], libvirt.virDomain | None]
    _domain: Callable[[str], libvirt.virDomain]
    _create_disk: Callable[..., None]
    _ensure_network: Callable[[], str]
    _ensure_filters: Callable[[], str]
    _shut_down: Callable[[libvirt.virDomain], None]
    _wait_for_ip: Callable[[libvirt.virDomain], str | None]

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
            if not self.is_test_driver:
                self._ensure_network()
                self._ensure_filters()
            target = Target(address, str(files.directory), self._base_sha256(files.disk),
                            nwfilter.gateway_of(self.settings["network_cidr"]))
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

    def finish_incoming(self, spec: dict[str, Any], moved: dict[str, Any],
                        power_on: bool) -> dict[str, Any]:
        """A cold move's end here: the files checked, the guest defined as it was there."""
        uuid = spec["uuid"]
        files = InstanceFiles.of(self.instances_dir, uuid)
        try:
            check_received(files.directory, moved["files"])
            own_base = self._base_of_image(spec)
            if moved.get("base_sha256") != (own_base and own_base[1]):
                raise BuildError("the disk's base image differs from this host's copy of the "
                                 "image (its URL serves other bytes now)")
            _check_overlay(files.disk)
            if own_base is not None:
                qemu_img.rebase_unsafe(files.disk, own_base[0], "qcow2")
            domain = self.connection.defineXMLFlags(
                domain_xml(self._domain_spec(spec, files, tuple(moved.get("macs") or ()))),
                libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            if not power_on:
                return {"ip": None}
            domain.create()
            return {"ip": self._wait_for_ip(domain)}
        except (ValueError, OSError, libvirt.libvirtError) as exc:
            raise BuildError(f"cold migration: {_line(exc)}") from None

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
        peer = self._open_peer(target)
        started = time.monotonic()
        try:
            watch, failure = self._migrate(domain, peer, target, files, progress, cancelled)
            if failure is not None and not self._moved_anyway(domain, peer, uuid, watch):
                why = watch.aborted or _line(failure)
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
            _close(peer)
        files.remove()
        log.info("instance %s: moved live to %s in %.1fs (downtime %s ms)", uuid,
                 target.address, result["seconds"], result.get("downtime_ms"))
        return result

    def _migrate(self, domain: libvirt.virDomain, peer: libvirt.virConnect, target: Target,
                 files: InstanceFiles, progress: Callable[[dict[str, Any]], None] | None,
                 cancelled: Callable[[], bool] | None
                 ) -> tuple[Supervisor, libvirt.libvirtError | None]:
        """The config drive sent, then the migration watched; how it ended (None: moved)."""
        try:
            send_files(peer, Path(target.instance_dir), {"config.iso": files.config_drive},
                       pool_name=domain.name())
            xml = destination_xml(domain.XMLDesc(libvirt.VIR_DOMAIN_XML_MIGRATABLE),
                                  files.directory, target)
        except (libvirt.libvirtError, OSError) as exc:
            raise BuildError(f"live migration to {target.address}: {_line(exc)}; the guest "
                             "runs on here") from None
        limits = Limits.from_settings(self._migration_settings())
        with Supervisor(domain, limits, progress, cancelled or (lambda: False)) as watch:
            try:
                domain.migrateToURI3(self._peer_uri(target),
                                     migration_params(target, xml, local_disks(xml), limits),
                                     LIVE_FLAGS)
            except libvirt.libvirtError as exc:
                return watch, exc
        return watch, None

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

    def send_stopped(self, uuid: str, target_data: dict[str, Any]) -> dict[str, Any]:
        """A cold move's part here: shut the guest down and send its files. It stays
        defined here, stopped; on failure it is as it was (running again if it ran)."""
        try:
            target = Target.from_dict(target_data)
        except (ValueError, TypeError) as exc:
            raise BuildError(f"cold migration: bad target: {exc}") from None
        domain = self._domain(uuid)
        files = InstanceFiles.of(self.instances_dir, uuid)
        self._check_same_base(files.disk, target)
        was_running = bool(domain.isActive())
        macs = mac_addresses(domain)
        peer = self._open_peer(target)
        try:
            self._shut_down(domain)
            with tempfile.TemporaryDirectory(prefix="console-") as scratch:
                history = Path(scratch) / "console.history.log"
                history.write_bytes(files.console_bytes(CONSOLE_HISTORY_BYTES))
                sent = send_files(peer, Path(target.instance_dir),
                                  {"disk.qcow2": files.disk, "config.iso": files.config_drive,
                                   "console.history.log": history}, pool_name=uuid)
        except (libvirt.libvirtError, OSError) as exc:
            if was_running and not domain.isActive():
                domain.create()
            raise BuildError(f"cold migration to {target.address}: {_line(exc)}; the guest "
                             f"is {'running' if was_running else 'stopped'} here as before") \
                from None
        finally:
            _close(peer)
        log.info("instance %s: stopped and sent to %s", uuid, target.address)
        return {"files": [s.to_dict() for s in sent], "macs": macs,
                "base_sha256": target.base_sha256, "was_running": was_running}

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
            raise BuildError(f"libvirtd of {target.address}: {_line(exc)}") from None

    def _base_sha256(self, overlay: Path) -> str | None:
        base = disks.backing_file(overlay)
        if base is None:
            return None
        record = self.images.record_of(base)
        if record is None:
            raise BuildError(f"{overlay.name}: its base {base} is not in the image cache")
        return str(record["sha256"])

    def _base_of_image(self, spec: dict[str, Any]) -> tuple[Path, str] | None:
        url = (spec.get("image") or {}).get("url") or self.settings["default_image"]
        base = self.images.base_path(url)
        record = self.images.record_of(base)
        return (base, str(record["sha256"])) if record else None

    def _check_same_base(self, overlay: Path, target: Target) -> None:
        own = self._base_sha256(overlay)
        if own != target.base_sha256:
            raise BuildError("the destination's base image differs from this guest's "
                             f"(sha256 {str(own)[:12]} here, {str(target.base_sha256)[:12]} "
                             "there): its URL serves other bytes now")

    def _domain_spec(self, spec: dict[str, Any], files: InstanceFiles,
                     macs: tuple[str, ...]) -> DomainSpec:
        meta, resources = instance_meta(spec), spec["resources"]
        test_driver = self.is_test_driver
        return DomainSpec(
            uuid=spec["uuid"], name=meta["name"], memory_mb=int(resources["MEMORY_MB"]),
            vcpus=int(resources["VCPU"]),
            domain_type=choose_domain_type(self.settings["domain_type"], self.connection),
            disk=files.disk, config_drive=files.config_drive, console_log=files.console_log,
            network=None if test_driver else self._ensure_network(),
            bridge=None if test_driver else self.settings["bridge"],
            nic_filter=None if test_driver else self._ensure_filters(),
            dhcp_server=nwfilter.gateway_of(self.settings["network_cidr"]), macs=macs)

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
                      "destroys it: the instance is not its)", uuid, _line(exc))
        return False

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
            log.warning("instance %s: console history not sent: %s", uuid, _line(exc))


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
                    "destination: %s", uuid, _line(exc))


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


def _check_overlay(path: Path) -> None:
    """What arrived is a qcow2 overlay and nothing more: its backing file is the one
    thing the inspector may object to (it is replaced next), no data file, no extents."""
    try:
        inspector = format_inspector.QcowInspector.from_file(str(path))
    except format_inspector.ImageFormatError:
        raise RequestError(f"{path.name}: not a qcow2 image") from None
    quiet = _Expected("Safety check backing_file")
    inspector_log = logging.getLogger(format_inspector.__name__)
    inspector_log.addFilter(quiet)
    try:
        inspector.safety_check()
    except format_inspector.SafetyCheckFailed as exc:
        others = set(exc.failures) - {"backing_file"}
        if others:
            raise RequestError(f"{path.name}: refused: {', '.join(sorted(others))}") from None
    finally:
        inspector_log.removeFilter(quiet)


class _Expected(logging.Filter):
    """Drops the inspector's warning about what is expected here (an overlay's backing)."""

    def __init__(self, prefix: str):
        super().__init__()
        self.prefix = prefix

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(self.prefix)


def _close(connection: libvirt.virConnect) -> None:
    try:
        connection.close()
    except libvirt.libvirtError:
        pass


