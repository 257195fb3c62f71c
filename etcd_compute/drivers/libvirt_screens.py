"""A guest's screen from libvirt, for the console relay (the compute's main process).

Our domains' VNC listens nowhere (`virt/domain.py`: `<listen type='none'/>`): no address,
no port, no socket file. libvirt hands a descriptor already connected to the guest's VNC
server to a client of its own socket (`virDomainOpenGraphicsFD`), which only root reaches
on a host; the relay carries that descriptor's bytes and nothing else. A domain that is
not ours, or not running, has no screen to give.
"""

from __future__ import annotations

import logging
import socket
import threading

import libvirt

from etcd_compute.drivers.base import Screens
from etcd_compute.virt.domain import is_ours

LOG = logging.getLogger("etcd_compute.compute")


class LibvirtScreens(Screens):
    def __init__(self, uri: str):
        self.uri = uri
        self._lock = threading.Lock()
        self._connection: libvirt.virConnect | None = None

    def _connect(self) -> libvirt.virConnect:
        with self._lock:
            if self._connection is None or not self._connection.isAlive():
                self._connection = libvirt.open(self.uri)
            return self._connection

    def open(self, uuid: str) -> socket.socket | None:
        try:
            domain = self._connect().lookupByName(uuid)
            if not is_ours(domain) or not domain.isActive():
                return None
            descriptor = domain.openGraphicsFD(0, 0)
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                LOG.info("instance %s: no screen from libvirt: %s", uuid,
                         exc.get_error_message())
            return None
        return socket.socket(fileno=descriptor)

    def close(self) -> None:
        with self._lock:
            if self._connection is not None:
                try:
                    self._connection.close()
                except libvirt.libvirtError:
                    pass
                self._connection = None
