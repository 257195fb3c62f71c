"""Who is asking: a request's source address -> the instance that holds it.

The source address -> the current DHCP lease for it on our network -> that
lease's MAC -> the running domain of ours with that MAC -> the instance's
meta.json in instances_dir/<uuid>/. Anything else resolves to nothing.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import libvirt

from etcd_compute.mdserver.addresses import ipv4_or_empty
from etcd_compute.mdserver.settings import MdserverConfig
from etcd_compute.virt import network
from etcd_compute.virt.domain import is_ours, mac_addresses
from etcd_compute.virt.instance_files import InstanceFiles

log = logging.getLogger("etcd_compute.mdserver")


class InstanceResolver:
    """Source address -> the meta.json of the instance that holds that address."""

    def __init__(self, config: MdserverConfig):
        self.config = config
        self._connection: libvirt.virConnect | None = None
        self._lock = threading.Lock()

    @property
    def connection(self) -> libvirt.virConnect:
        with self._lock:
            if self._connection is None or not self._connection.isAlive():
                self._connection = libvirt.open(self.config.libvirt_uri)
            return self._connection

    def meta_for_request(self, environ: dict[str, Any]) -> dict[str, Any] | None:
        """The meta.json of the guest whose address the request comes from."""
        return self.meta_for(environ.get("REMOTE_ADDR", ""))

    def address_for_request(self, environ: dict[str, Any]) -> str:
        """The guest's own address: where the request comes from."""
        return ipv4_or_empty(environ.get("REMOTE_ADDR", ""))

    def meta_for(self, ip: str) -> dict[str, Any] | None:
        try:
            net = self.connection.networkLookupByName(self.config.network)
            macs = network.macs_for_ip(net, ip)
            if not macs:
                return None
            domains = self.connection.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
            for mac in macs:  # newest lease first
                for domain in domains:
                    if is_ours(domain) and mac in mac_addresses(domain, self.config.network):
                        try:
                            files = InstanceFiles.of(self.config.instances_dir, domain.name())
                        except ValueError:
                            log.warning("domain %r is marked ours but is not named by an "
                                        "instance uuid; ignored", domain.name())
                            continue
                        return files.read_meta()
        except libvirt.libvirtError as exc:
            log.warning("lookup of %s failed: %s", ip, exc.get_error_message())
        return None
