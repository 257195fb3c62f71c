"""The libvirt driver: real VMs (qemu:///system) or libvirt's test driver (test:///default).

build: base image (cache) -> qcow2 overlay -> NoCloud config drive -> meta.json
-> define (validated) -> start -> wait for the guest's DHCP lease. Any failure
removes everything the build created and raises BuildError with one line.

stop, reboot and resize ask the guest to power off (ACPI) and power it off hard
after `shutdown_timeout_seconds`, as Nova does (a paused guest's reboot is hard at once).
suspend is libvirt's managed save (the memory on disk, the domain stopped); pause is
libvirt's suspend of the domain (its vCPUs stopped, the memory in qemu: Nova's pause).
resize redefines the domain with the new memory and vCPUs (all else kept: MAC, disks,
filters) and grows the disk; a failure puts the old definition back. rebuild stages a new
overlay from the image first (a refused image leaves the guest untouched), then powers the
guest off and swaps the disk; the domain, so its MAC and its DHCP address, stay.

With the test driver (fast tests) there is no hypervisor behind the domain:
no image is downloaded (a file:// image must still exist), no network is set
up, the domain is defined and started and the ip is None. The connection, our
domains on it and what building, acting and moving share: `libvirt_host.py`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import libvirt

from etcd_compute.drivers.libvirt_cold_move import LibvirtColdMoves
from etcd_compute.drivers.libvirt_host import GIB, reason_of
from etcd_compute.drivers.libvirt_hotplug import LibvirtHotplug
from etcd_compute.errors import BuildError, ConfigError, RequestError
from etcd_compute.virt import configdrive, nwfilter, qemu_img, snapshot
from etcd_compute.virt.domain import (
    DomainSpec,
    choose_domain_type,
    domain_xml,
    power_off,
    resized_xml,
)
from etcd_compute.virt.instance_files import InstanceFiles, instance_meta
from etcd_compute.virt.vif import Vif

log = logging.getLogger(__name__)

# What a spec must claim for this driver to build it (the scheduler refuses requests
# without them; a spec that reaches us anyway is the request's fault).
REQUIRED_RESOURCES = ("VCPU", "MEMORY_MB", "DISK_GB")
# Remove managed-save images, snapshot metadata and UEFI NVRAM with the domain
# (the test driver knows no NVRAM).
UNDEFINE_FLAGS = (
    libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
)
UNDEFINE_FLAGS_QEMU = UNDEFINE_FLAGS | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM


class LibvirtDriver(LibvirtHotplug, LibvirtColdMoves):
    """Builds, acts on, moves and destroys guests (see the module's docstring; moving:
    `libvirt_migration.py`, `libvirt_cold_move.py`; hot-plugging ports:
    `libvirt_hotplug.py`)."""

    # -- build -------------------------------------------------------------------------

    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        uuid = spec["uuid"]
        try:
            existing = self._our_domain(uuid)
            if existing is not None:
                # A repeated job (daemon restart): finish what the first one started.
                log.info("instance %s: already defined, resuming", uuid)
                if spec.get("stopped"):
                    return {"ip": None}
                if not existing.isActive():
                    existing.create()
                return {"ip": self._wait_for_ip(existing)}
            return {"ip": self._build_new(spec)}
        except (BuildError, libvirt.libvirtError, OSError, ValueError) as exc:
            reason = reason_of(exc) if isinstance(exc, libvirt.libvirtError) else str(exc)
            log.warning("instance %s: build failed: %s", uuid, reason)
            self.destroy(uuid)
            if isinstance(exc, BuildError):
                raise
            # One line, bounded: it becomes the record's error (at most 4096 characters).
            line = reason.splitlines()[0] if reason else type(exc).__name__
            raise BuildError(line[:1000]) from None

    def prefetch(self, spec: dict[str, Any]) -> None:
        """The build's base image into the cache, with the build's checks (nothing with the
        test driver, nor for an instance already defined): run while the claim is checked."""
        resources = spec.get("resources") or {}
        if self.is_test_driver or "DISK_GB" not in resources or \
                self._our_domain(spec["uuid"]) is not None:
            return
        image = spec.get("image") or {"url": self.settings["default_image"], "sha256": None}
        self.images.fetch(image["url"], image.get("sha256"),
                          max_virtual_size=int(resources["DISK_GB"]) * GIB)

    def _build_new(self, spec: dict[str, Any]) -> str | None:
        uuid = spec["uuid"]
        files = InstanceFiles.of(self.instances_dir, uuid)
        files.remove()  # leftovers of a build that died before defining the domain
        files.create()
        image = spec.get("image") or {"url": self.settings["default_image"], "sha256": None}
        resources = spec["resources"]
        missing = [rc for rc in REQUIRED_RESOURCES if rc not in resources]
        if missing:
            raise RequestError(f"the request claims no {', '.join(missing)}: the libvirt "
                               f"driver needs {', '.join(REQUIRED_RESOURCES)}")
        test_driver = self.is_test_driver

        self._create_disk(image, int(resources["DISK_GB"]), files.disk, test_driver)

        meta = instance_meta(spec)
        configdrive.write_config_drive(
            files.config_drive, uuid, meta["hostname"], meta["user_data"], meta["ssh_key"]
        )
        files.write_meta(meta)

        # No interface for the test driver, nor for a guest asked without one (networks
        # none): it then gets no address (_wait_for_ip finds no MAC).
        # On Neutron ports (spec["vifs"], made by compute/ports.py): no libvirt network,
        # no nwfilter (the ports' security groups are Neutron's).
        vifs = tuple(Vif.from_dict(vif) for vif in spec.get("vifs") or ())
        on_ports = spec.get("vifs") is not None
        networked = not test_driver and not on_ports and spec.get("network", True)
        network_name = self._ensure_network() if networked else None
        nic_filter = self._ensure_filters(spec.get("security_groups")) if networked else None
        domain_spec = DomainSpec(
            uuid=uuid,
            name=meta["name"],
            memory_mb=int(resources["MEMORY_MB"]),
            vcpus=int(resources["VCPU"]),
            domain_type=choose_domain_type(self.settings["domain_type"], self.connection),
            disk=files.disk,
            config_drive=files.config_drive,
            console_log=files.console_log,
            network=network_name,
            bridge=self.settings["bridge"] if networked else None,
            nic_filter=nic_filter,
            dhcp_server=nwfilter.gateway_of(self.settings["network_cidr"]),
            vifs=vifs,
        )
        domain = self.connection.defineXMLFlags(
            domain_xml(domain_spec), libvirt.VIR_DOMAIN_DEFINE_VALIDATE
        )
        if spec.get("stopped"):
            log.info("instance %s: defined, left powered off (it was stopped)", uuid)
            return None
        domain.create()
        log.info("instance %s: started (%s)", uuid, domain_spec.domain_type)
        if test_driver:
            return None
        return self._wait_for_ip(domain)

    # -- an operator's actions ---------------------------------------------------------

    def stop(self, uuid: str) -> None:
        self._action(uuid, "stop", lambda: self._shut_down(self._domain(uuid)))

    def start(self, uuid: str) -> dict[str, Any]:
        def step() -> dict[str, Any]:
            domain = self._domain(uuid)
            if not domain.isActive():
                domain.create()
            return {"ip": self._current_ip(domain)}

        return self._action(uuid, "start", step)

    def suspend(self, uuid: str) -> None:
        def step() -> None:
            # libvirt's managed save (Nova's suspend): the guest's memory written beside
            # its domain, the domain stopped; `create` restores it (resume).
            domain = self._domain(uuid)
            if domain.isActive():
                domain.managedSave(0)
            elif not domain.hasManagedSaveImage(0):
                raise BuildError("suspend: the guest is not running")

        self._action(uuid, "suspend", step)

    def resume(self, uuid: str) -> dict[str, Any]:
        def step() -> dict[str, Any]:
            domain = self._domain(uuid)
            if not domain.isActive():
                domain.create()  # from the managed-save image
            return {"ip": self._current_ip(domain)}

        return self._action(uuid, "resume", step)

    def pause(self, uuid: str) -> None:
        def step() -> None:
            # libvirt's suspend of the domain (Nova's pause): its vCPUs stopped, its memory
            # left in qemu's process; the domain stays active, in libvirt's PAUSED state.
            domain = self._domain(uuid)
            if not domain.isActive():
                raise BuildError("pause: the guest is not running")
            if domain.state()[0] != libvirt.VIR_DOMAIN_PAUSED:
                domain.suspend()

        self._action(uuid, "pause", step)

    def unpause(self, uuid: str) -> dict[str, Any]:
        def step() -> dict[str, Any]:
            domain = self._domain(uuid)
            if not domain.isActive():
                raise BuildError("unpause: the guest is not running (its memory is gone)")
            if domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
                domain.resume()
            return {"ip": self._current_ip(domain)}

        return self._action(uuid, "unpause", step)

    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        def step() -> dict[str, Any]:
            domain = self._domain(uuid)
            # A paused guest cannot answer the ACPI request: powered off at once.
            if hard or domain.state()[0] == libvirt.VIR_DOMAIN_PAUSED:
                power_off(domain)
            else:
                self._shut_down(domain)
            domain.create()
            return {"ip": self._current_ip(domain)}

        return self._action(uuid, "reboot", step)

    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid, resources = spec["uuid"], spec["resources"]
        missing = [rc for rc in REQUIRED_RESOURCES if rc not in resources]
        if missing:
            raise RequestError(f"resize: no {', '.join(missing)} in the new size")
        return self._action(uuid, "resize", lambda: self._resize(spec, power_on))

    def _resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid, resources = spec["uuid"], spec["resources"]
        domain = self._domain(uuid)
        files = InstanceFiles.of(self.instances_dir, uuid)
        old_xml = domain.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
        new_xml = resized_xml(old_xml, int(resources["MEMORY_MB"]), int(resources["VCPU"]))
        disk_size = int(resources["DISK_GB"]) * GIB
        has_disk = files.disk.exists()
        if has_disk and qemu_img.virtual_size(files.disk, "qcow2") > disk_size:
            raise RequestError(f"resize: DISK_GB {resources['DISK_GB']} is smaller than the "
                               "disk: a disk cannot shrink")
        self._shut_down(domain)
        try:
            domain = self.connection.defineXMLFlags(new_xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            if has_disk:
                qemu_img.grow(files.disk, "qcow2", disk_size)
            if power_on:
                domain.create()
        except (libvirt.libvirtError, BuildError, OSError):
            # Back to the old size (a grown disk stays: the guest may not have used it yet).
            domain = self.connection.defineXMLFlags(old_xml, libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
            if power_on and not domain.isActive():
                domain.create()
            raise
        log.info("instance %s: resized to %s MiB, %s vCPU", uuid, resources["MEMORY_MB"],
                 resources["VCPU"])
        return {"ip": self._current_ip(domain)}

    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid = spec["uuid"]
        files = InstanceFiles.of(self.instances_dir, uuid)
        image = spec.get("image") or {"url": self.settings["default_image"], "sha256": None}
        domain = self._domain(uuid)
        files.staged_disk.unlink(missing_ok=True)
        try:
            # The new disk first: a refused or broken image leaves the guest as it was.
            self._action(uuid, "rebuild", lambda: self._create_disk(
                image, int(spec["resources"]["DISK_GB"]), files.staged_disk,
                self.is_test_driver))
        except BaseException:
            files.staged_disk.unlink(missing_ok=True)
            raise

        def swap() -> dict[str, Any]:
            power_off(domain)  # its disk is thrown away: no need to ask it first
            if files.staged_disk.exists():
                files.staged_disk.replace(files.disk)
            meta = instance_meta(spec)
            configdrive.write_config_drive(files.config_drive, uuid, meta["hostname"],
                                           meta["user_data"], meta["ssh_key"])
            files.write_meta(meta)
            if power_on:
                domain.create()
            log.info("instance %s: rebuilt from %s", uuid, image["url"])
            return {"ip": self._current_ip(domain)}

        return self._action(uuid, "rebuild", swap)

    def snapshot(self, spec: dict[str, Any], image_id: str, running: bool) -> dict[str, Any]:
        uuid = spec["uuid"]
        if self.is_test_driver:
            raise BuildError("snapshot: libvirt's test driver has no disks to snapshot")
        files = InstanceFiles.of(self.instances_dir, uuid)
        domain = self._domain(uuid)
        target = files.directory / "snapshot.qcow2"

        try:
            glance = self.images.glance()
        except ConfigError as exc:
            raise BuildError(f"snapshot: this host cannot reach Glance: {exc}") from None

        def take() -> dict[str, Any]:
            started = time.monotonic()
            live = bool(domain.isActive())  # as it runs now, whatever the task began from
            try:
                size = snapshot.flatten(files.disk, target, live, domain,
                                        self.settings["image_download_timeout_seconds"])
                snapshot.upload(glance, image_id, target)
            finally:
                target.unlink(missing_ok=True)
            took = time.monotonic() - started
            log.info("instance %s: snapshot %s uploaded (%d bytes, %s, %.1f s)", uuid, image_id,
                     size, "live" if live else "stopped", took)
            return {"detail": f"image {image_id}: {size / 1024**2:.0f} MiB, "
                              f"{'live' if live else 'powered off'}, {took:.1f} s"}

        return self._action(uuid, "snapshot", take)

    def set_security_groups(self, spec: dict[str, Any], groups: list[str]) -> None:
        """Swap the filter on the guest's NIC (nwfilter.guest_filter_for): the running
        guest's at once (qemu's driver instantiates the new filter on its tap device) and
        its definition, for its next start. Done already (a job run again): nothing."""
        uuid = spec["uuid"]

        def refilter(domain: libvirt.virDomain, affect: int, xml_flags: int,
                     wanted: str) -> bool:
            nics = nwfilter.refiltered_interfaces(domain.XMLDesc(xml_flags), wanted)
            for nic in nics:
                domain.updateDeviceFlags(nic, affect)
            return bool(nics)

        def swap() -> None:
            domain = self._domain(uuid)
            wanted = nwfilter.guest_filter_for(groups)
            views = [(libvirt.VIR_DOMAIN_AFFECT_CONFIG, libvirt.VIR_DOMAIN_XML_INACTIVE)]
            if domain.isActive():
                views.insert(0, (libvirt.VIR_DOMAIN_AFFECT_LIVE, 0))
            if any(nwfilter.refiltered_interfaces(domain.XMLDesc(flags), wanted)
                   for _, flags in views):
                self._ensure_filters(groups)  # the filter it names must exist (a host of before)
            changed: list[tuple[int, int]] = []
            try:
                for affect, xml_flags in views:
                    if refilter(domain, affect, xml_flags, wanted):
                        changed.append((affect, xml_flags))
            except libvirt.libvirtError:
                # All or nothing: the running guest and its definition stay alike, as the
                # record says (the action fails and ends as it started).
                before = nwfilter.guest_filter_for([] if groups else None)
                for affect, xml_flags in changed:
                    refilter(domain, affect, xml_flags, before)
                raise
            log.info("instance %s: security groups %s (nwfilter %s)", uuid,
                     ", ".join(groups) or "none", wanted)

        self._action(uuid, "security-groups", swap)

    # -- destroy -----------------------------------------------------------------------

    def destroy(self, uuid: str) -> None:
        domain = None
        try:
            domain = self._our_domain(uuid)
        except BuildError:
            log.warning("instance %s: a domain of that name is not ours, left alone", uuid)
        if domain is not None:
            try:
                if domain.isActive():
                    domain.destroy()
            except libvirt.libvirtError as exc:
                if exc.get_error_code() not in (
                    libvirt.VIR_ERR_OPERATION_INVALID,  # stopped meanwhile
                    libvirt.VIR_ERR_NO_DOMAIN,
                ):
                    raise
            self._release_addresses(domain)
            try:
                domain.undefineFlags(
                    UNDEFINE_FLAGS if self.is_test_driver else UNDEFINE_FLAGS_QEMU
                )
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                    raise
            log.info("instance %s: domain removed", uuid)
        InstanceFiles.of(self.instances_dir, uuid).remove()
