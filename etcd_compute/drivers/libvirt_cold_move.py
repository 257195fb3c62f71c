"""A cold move between two hosts' libvirtds: the guest stopped, its files sent, defined
again there (the libvirt driver's part of issue 21; the destination is made ready as for
a live move, `libvirt_migration.py`).

`send_stopped` (on the source) shuts the guest down (asked, then forced) and sends its
overlay, config drive and console history through the destination's storage API.
`finish_incoming` (on the destination) checks each file against the size and sha256 the
source reports, checks the overlay is a qcow2 with nothing but a backing file, points it
at this host's copy of the base (the same bytes: checked by sha256), and defines (and
starts) the guest with the same MAC and identity; the address it had there is reserved
for it here when no other guest holds it (else its DHCP gives it another). The source
keeps its stopped guest until the move is confirmed (`destroy`) or reverted (`power_on`);
a copy cut short starts it again at once.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path
from typing import Any

import libvirt
from oslo_utils.imageutils import format_inspector

from etcd_compute.drivers.libvirt_migration import LibvirtMigrations, close_quietly, one_line
from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import network, nwfilter, qemu_img
from etcd_compute.virt.domain import DomainSpec, choose_domain_type, domain_xml, mac_addresses
from etcd_compute.virt.instance_files import CONSOLE_HISTORY_BYTES, InstanceFiles, instance_meta
from etcd_compute.virt.migration import Target
from etcd_compute.virt.remote_files import check_received, send_files
from etcd_compute.virt.vif import Vif

log = logging.getLogger(__name__)


class LibvirtColdMoves(LibvirtMigrations):
    """A cold move's two ends, on the live move's destination and helpers."""

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
        address = self._guest_address(domain)
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
            raise BuildError(f"cold migration to {target.address}: {one_line(exc)}; the guest "
                             f"is {'running' if was_running else 'stopped'} here as before") \
                from None
        finally:
            close_quietly(peer)
        log.info("instance %s: stopped and sent to %s", uuid, target.address)
        return {"files": [s.to_dict() for s in sent], "macs": macs,
                "base_sha256": target.base_sha256, "was_running": was_running,
                "address": list(address) if address else None}


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
            self._keep_address(moved.get("address"))
            if not power_on:
                return {"ip": None}
            domain.create()
            return {"ip": self._wait_for_ip(domain)}
        except (ValueError, OSError, libvirt.libvirtError) as exc:
            raise BuildError(f"cold migration: {one_line(exc)}") from None


    def _domain_spec(self, spec: dict[str, Any], files: InstanceFiles,
                     macs: tuple[str, ...]) -> DomainSpec:
        meta, resources = instance_meta(spec), spec["resources"]
        # As it was built: no interface for the test driver nor a guest without a network;
        # on Neutron ports (spec["vifs"]) its NICs on the integration bridge.
        networked = not self.is_test_driver and spec.get("network", True) and \
            spec.get("vifs") is None
        return DomainSpec(
            uuid=spec["uuid"], name=meta["name"], memory_mb=int(resources["MEMORY_MB"]),
            vcpus=int(resources["VCPU"]),
            domain_type=choose_domain_type(self.settings["domain_type"], self.connection),
            disk=files.disk, config_drive=files.config_drive, console_log=files.console_log,
            network=self._ensure_network() if networked else None,
            bridge=self.settings["bridge"] if networked else None,
            nic_filter=self._ensure_filters(spec.get("security_groups")) if networked else None,
            dhcp_server=nwfilter.gateway_of(self.settings["network_cidr"]), macs=macs,
            vifs=tuple(Vif.from_dict(vif) for vif in spec.get("vifs") or ()))


    def _keep_address(self, address: list[str] | None) -> None:
        """Reserve here the address the guest had there, unless another guest holds it."""
        if not address or self.is_test_driver:
            return
        mac, ip = address
        net = self.connection.networkLookupByName(self.settings["network"])
        holder = network.holder_of(net, ip)
        if holder in (None, mac.lower()):
            network.reserve(net, mac, ip)
        else:
            log.warning("address %s is another guest's here: %s gets a new one", ip, mac)


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


