"""Hot-plugging a guest's Neutron ports (the compute API's os-interface), as Nova's
libvirt driver does: attachDeviceFlags / detachDeviceFlags of the NIC's `<interface>`
(virt/vif.py, the same XML a build defines), on the running guest (AFFECT_LIVE) when it
runs and on its definition (AFFECT_CONFIG) always, so a stop and start keeps it.

A live detach asks the guest to let the device go (PCI hot-unplug through ACPI): libvirt
returns before it has, so the live definition is read until the NIC is gone, the detach
asked again now and then (a guest still booting may miss the first request), as Nova waits
for the device-removed event and retries. Both are idempotent: a job run again (a restart,
a lost worker) finds the NIC plugged, or gone, and does nothing more.
"""

from __future__ import annotations

import logging
import time

import libvirt

from etcd_compute.drivers.libvirt_host import LibvirtHost
from etcd_compute.errors import BuildError
from etcd_compute.virt import vif as vifs

log = logging.getLogger(__name__)

# A live detach: how long the guest has to let the NIC go, how often it is asked again.
DETACH_SECONDS, DETACH_RETRY_SECONDS, POLL_SECONDS = 60.0, 10.0, 0.5


def _views(domain: libvirt.virDomain) -> list[tuple[int, int]]:
    """(affect flag, the XMLDesc flags of that view): the definition, and the live guest
    when it runs."""
    views = [(libvirt.VIR_DOMAIN_AFFECT_CONFIG, libvirt.VIR_DOMAIN_XML_INACTIVE)]
    if domain.isActive():
        views.insert(0, (libvirt.VIR_DOMAIN_AFFECT_LIVE, 0))
    return views


class LibvirtHotplug(LibvirtHost):
    def attach_interface(self, uuid: str, vif: dict[str, object]) -> None:
        def plug() -> None:
            nic = vifs.Vif.from_dict(dict(vif))  # checked: a bad one is the job's error
            domain = self._domain(uuid)
            for affect, xml_flags in _views(domain):
                if nic.port_id in vifs.port_ids(domain.XMLDesc(xml_flags)):
                    continue  # plugged already (a job run again)
                domain.attachDeviceFlags(vifs.interface_xml(nic), affect)
                log.info("instance %s: port %s plugged (%s)", uuid, nic.port_id, nic.device)

        self._action(uuid, "attach-interface", plug)

    def detach_interface(self, uuid: str, port_id: str) -> None:
        def unplug() -> None:
            domain = self._domain(uuid)
            for affect, xml_flags in _views(domain):
                self._detach(domain, port_id, affect, xml_flags)
            log.info("instance %s: port %s unplugged", uuid, port_id)

        self._action(uuid, "detach-interface", unplug)

    @staticmethod
    def _detach(domain: libvirt.virDomain, port_id: str, affect: int, xml_flags: int) -> None:
        began = asked = time.monotonic()
        found = vifs.interface_of(domain.XMLDesc(xml_flags), port_id)
        if found is None:
            return
        domain.detachDeviceFlags(found, affect)
        while affect == libvirt.VIR_DOMAIN_AFFECT_LIVE:
            found = vifs.interface_of(domain.XMLDesc(xml_flags), port_id)
            if found is None or not domain.isActive():
                return
            now = time.monotonic()
            if now - began > DETACH_SECONDS:
                raise BuildError(f"the guest did not let port {port_id} go within "
                                 f"{DETACH_SECONDS:g} s (its OS must allow PCI hot-unplug)")
            if now - asked > DETACH_RETRY_SECONDS:
                asked = now
                try:
                    domain.detachDeviceFlags(found, affect)
                except libvirt.libvirtError as exc:  # a detach already under way
                    log.debug("detach of %s asked again: %s", port_id, exc)
            time.sleep(POLL_SECONDS)
