"""The libvirt driver's host side: the connection, our domains on it, and what building
and acting on a guest share.

`LibvirtHost` opens qemu:///system (or the test driver) and opens it again if libvirtd
went away, tells our domains from others' (`is_ours`: only ours are powered, listed or
removed), powers them off and on (a fence, a reconcile), reads their consoles, sets up
the guests' network and filters, waits for a guest's DHCP lease, and turns libvirt's and
the OS's errors into one-line BuildErrors, and makes a guest's disk (an overlay on the
cached image: a build, a rebuild, a guest moving here). `drivers/libvirt.py` builds,
acts and destroys on top of it; `libvirt_migration.py` and `libvirt_cold_move.py` move.
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from pathlib import Path
from typing import Any

import filelock
import libvirt

from etcd_compute.drivers.base import Driver
from etcd_compute.errors import BuildError, RequestError, ServiceUnavailable
from etcd_compute.glance import GlanceClient
from etcd_compute.virt import diagnostics, disks, network, nwfilter
from etcd_compute.virt.domain import is_ours, mac_addresses, power_off, shut_down
from etcd_compute.virt.images import ImageCache
from etcd_compute.virt.instance_files import InstanceFiles, bases_in_use
from etcd_compute.virt.sources import SourcePolicy

log = logging.getLogger("etcd_compute.drivers.libvirt")

GIB = 1024**3
LEASE_POLL_SECONDS = 0.5


def reason_of(exc: libvirt.libvirtError) -> str:
    """libvirt's message, first line."""
    return (exc.get_error_message() or str(exc)).splitlines()[0]


def source_policy(settings: dict[str, Any]) -> SourcePolicy:
    """Where images may come from and how much of them is read (driver.libvirt settings)."""
    return SourcePolicy(
        file_dirs=tuple(settings["image_file_dirs"]),
        max_bytes=int(settings["image_max_gb"] * GIB),
        deadline_seconds=float(settings["image_download_timeout_seconds"]),
    )


class LibvirtHost(Driver):
    name = "libvirt"

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.settings = config["driver"]["libvirt"]
        self.instances_dir = Path(config["compute"]["instances_dir"])
        self.images = ImageCache(
            self.settings["image_cache_dir"],
            int(self.settings["image_cache_max_gb"] * GIB),
            in_use=lambda: bases_in_use(self.instances_dir),
            policy=source_policy(self.settings),
            glance=lambda: GlanceClient(config["glance"]),
        )
        # A worker starts (or replaces one killed for its timeout): partial files
        # that no one is writing are a killed job's.
        self.images.sweep()
        self._connection: libvirt.virConnect | None = None

    # -- connection --------------------------------------------------------------------

    @property
    def connection(self) -> libvirt.virConnect:
        """The libvirt connection, reopened if libvirtd went away."""
        if self._connection is not None and self._connection.isAlive():
            return self._connection
        uri = self.settings["uri"]
        try:
            self._connection = libvirt.open(uri)
        except libvirt.libvirtError as exc:
            raise ServiceUnavailable(f"libvirt {uri}: {reason_of(exc)}") from None
        return self._connection

    @property
    def is_test_driver(self) -> bool:
        return self.connection.getType().lower() == "test"

    def check(self) -> str:
        connection = self.connection
        try:
            version = connection.getLibVersion()
            kind = connection.getType()
        except libvirt.libvirtError as exc:
            raise ServiceUnavailable(f"libvirt {self.settings['uri']}: {reason_of(exc)}") from None
        major, minor = version // 1_000_000, version // 1000 % 1000
        return f"libvirt {major}.{minor} {kind} at {self.settings['uri']}"

    def close(self) -> None:
        if self._connection is not None:
            try:
                self._connection.close()
            except libvirt.libvirtError:
                pass
            self._connection = None

    # -- our domains -------------------------------------------------------------------

    def _our_domain(self, uuid: str) -> libvirt.virDomain | None:
        try:
            domain = self.connection.lookupByName(uuid)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return None
            raise
        if not is_ours(domain):
            raise BuildError(f"a domain named {uuid} exists but is not one of ours")
        return domain

    def running(self) -> set[str]:
        active = self.connection.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        return {d.name() for d in active if is_ours(d)}

    def power_off(self, uuid: str) -> bool:
        domain = self._our_domain(uuid)
        if domain is None or not power_off(domain):
            return False
        log.info("instance %s: powered off", uuid)
        return True

    def power_on(self, uuid: str) -> bool:
        domain = self._our_domain(uuid)
        if domain is None or domain.isActive():
            return False
        domain.create()
        log.info("instance %s: powered on", uuid)
        return True

    def list_instances(self) -> set[str]:
        return {d.name() for d in self.connection.listAllDomains() if is_ours(d)}

    def console(self, uuid: str, max_bytes: int = 65536) -> str:
        return InstanceFiles.of(self.instances_dir, uuid).console_tail(max_bytes)

    def diagnostics(self, uuid: str) -> dict[str, Any] | None:
        domain = self._our_domain(uuid)
        if domain is None:
            return None
        try:
            return diagnostics.of_domain(domain)
        except libvirt.libvirtError:
            return None  # gone meanwhile

    # -- the guests' network -----------------------------------------------------------

    def _ensure_network(self) -> str:
        name = self.settings["network"]
        self.instances_dir.mkdir(parents=True, exist_ok=True)
        # Workers start builds at once; one of them defines the network.
        with filelock.FileLock(str(self.instances_dir / ".network.lock")):
            net = network.ensure_network(self.connection, name, self.settings["network_cidr"])
            try:
                network.add_metadata_address(net.bridgeName())
            except OSError as exc:
                log.warning("network %s: %s", name, exc)
        return name

    def _ensure_filters(self, groups: list[str] | None = None) -> str:
        """Our nwfilters, defined if missing or changed (one worker at a time); the one a
        NIC of an instance in security `groups` carries (None: the default group)."""
        with filelock.FileLock(str(self.instances_dir / ".network.lock")):
            nwfilter.ensure_filters(
                self.connection, int(self.settings["metadata_connections_per_guest"]))
        return nwfilter.guest_filter_for(groups)

    def _wait_for_ip(self, domain: libvirt.virDomain) -> str | None:
        """The guest's address once it has a DHCP lease; BuildError if it never gets one."""
        if self.is_test_driver:
            return None
        name = self.settings["network"]
        macs = mac_addresses(domain, name)
        if not macs:
            return None
        net = self.connection.networkLookupByName(name)
        timeout = float(self.settings["boot_timeout_seconds"])
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            ip = network.lease_ip(net, macs[0])
            if ip:
                log.info(
                    "instance %s: %s after %.1fs", domain.name(), ip, time.monotonic() - started
                )
                return ip
            try:
                if not domain.isActive():
                    raise BuildError("guest stopped while booting (see its console)")
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    raise BuildError("instance was destroyed while booting") from None
                raise
            time.sleep(LEASE_POLL_SECONDS)
        raise BuildError(
            f"no DHCP lease within {timeout:g}s: the guest did not boot (see its console)"
        )

    # -- what builds and actions share -------------------------------------------------

    def _domain(self, uuid: str) -> libvirt.virDomain:
        domain = self._our_domain(uuid)
        if domain is None:
            raise BuildError(f"instance {uuid} has no domain on this host")
        return domain

    def _create_disk(self, image: dict[str, Any], disk_gb: int, path: Path,
                     test_driver: bool) -> None:
        """An overlay of `disk_gb` at `path` on the (cached) image; nothing with the test
        driver but the check that a local image exists."""
        if test_driver:
            _check_local_image(image["url"])
            return
        glance = image.get("glance")
        with self.images.lock(image["url"], glance):  # eviction waits until the overlay exists
            base = self.images.fetch(image["url"], image.get("sha256"), glance=glance,
                                     max_virtual_size=disk_gb * GIB)
            disks.create_overlay(base, "qcow2", path, disk_gb)

    def _shut_down(self, domain: libvirt.virDomain) -> None:
        how = shut_down(domain, float(self.settings["shutdown_timeout_seconds"]))
        log.info("instance %s: %s", domain.name(), how)

    def _current_ip(self, domain: libvirt.virDomain) -> str | None:
        """The address of the guest's current lease (its MAC keeps it), without waiting."""
        if self.is_test_driver:
            return None
        macs = mac_addresses(domain, self.settings["network"])
        if not macs:
            return None
        return network.lease_ip(self.connection.networkLookupByName(self.settings["network"]),
                                macs[0])

    def _action(self, uuid: str, what: str, step: Any) -> dict[str, Any]:
        """`step()` with libvirt's and the OS's errors as a one-line BuildError."""
        try:
            result = step()
        except BuildError:
            raise
        except (libvirt.libvirtError, OSError, ValueError) as exc:
            reason = reason_of(exc) if isinstance(exc, libvirt.libvirtError) else str(exc)
            log.warning("instance %s: %s failed: %s", uuid, what, reason)
            raise BuildError(f"{what}: {(reason.splitlines() or [type(exc).__name__])[0]}"
                             [:1000]) from None
        return result or {}


def _check_local_image(url: str) -> None:
    """With the test driver nothing is downloaded, but a local image must exist."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file" and not Path(urllib.parse.unquote(parsed.path)).is_file():
        raise RequestError(f"image {url}: no such file")
