"""Which network the guests are on: the one home of that choice, asked by the compute
(how it plugs a guest), the scheduler (which hosts it may pick) and the compute API (what
a request may ask for).

`libvirt`: each host's own libvirt NAT network (the seed's shape; one box, no Neutron).
`neutron`: every guest on Neutron ports, plugged into the host's Open vSwitch integration
bridge (OVN), the backend of `make up` and the multi-host guide. A host advertises its
backend as a trait of its resource provider (`trait_of`) and the scheduler asks Placement
only for hosts with its own, so a request is never placed on a host that would plug it
into the other kind of network.
"""

from __future__ import annotations

from typing import Any

from etcd_compute.errors import UsageError

LIBVIRT = "libvirt"
NEUTRON = "neutron"
BACKENDS = (LIBVIRT, NEUTRON)
_TRAITS = {LIBVIRT: "CUSTOM_ETCD_COMPUTE_NETWORK_LIBVIRT",
           NEUTRON: "CUSTOM_ETCD_COMPUTE_NETWORK_NEUTRON"}


def backend_of(config: dict[str, Any]) -> str:
    """`libvirt` or `neutron`, from the config's `network.backend`."""
    return str((config.get("network") or {}).get("backend") or LIBVIRT)


def uses_neutron(config: dict[str, Any]) -> bool:
    return backend_of(config) == NEUTRON


def trait_of(backend: str) -> str:
    """The trait a host of `backend` carries and a request for it requires."""
    return _TRAITS[backend]


def refuse_unless_neutron(config: dict[str, Any], what: str) -> None:
    """A one-line refusal of `what` (a feature only Neutron gives) under the libvirt backend."""
    if not uses_neutron(config):
        raise UsageError(f"{what} needs network.backend neutron; this cloud's guests are on "
                         "each host's libvirt network")
