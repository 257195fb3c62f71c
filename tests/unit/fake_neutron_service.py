"""A Neutron in memory, with NeutronClient's methods (etcd_compute/neutron.py), for the unit
tests of what drives it (compute/ports.py, compute/worker.py): networks and ports as
Neutron keeps them, the refusals it answers with, and an outage switch (`down`: every call
raises NeutronUnavailable, as the client does when Neutron cannot be reached)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

from etcd_compute.errors import NeutronError, NeutronUnavailable, NotFound

DEMO, ALT = "demo-project", "alt-project"
_ids = itertools.count(1)


def new_id() -> str:
    return f"00000000-0000-4000-8000-{next(_ids):012d}"


class FakeNeutron:
    def __init__(self) -> None:
        self.networks_by_id: dict[str, dict[str, Any]] = {}
        self.ports_by_id: dict[str, dict[str, Any]] = {}
        self.groups: list[dict[str, Any]] = []
        self.calls: list[tuple[str, Any]] = []
        # A port's inactive bindings, by host (its active one is its binding:host_id).
        self.inactive: dict[str, dict[str, dict[str, Any]]] = {}
        self.down = False
        # Calls (by method name) that fail from the n-th on: {"create_port": 2}.
        self.fail_from: dict[str, int] = {}
        self._counts: dict[str, int] = {}

    # --- the cloud, as a test sets it up -------------------------------------------

    def add_network(self, project_id: str = DEMO, shared: bool = False,
                    mtu: int = 1442) -> dict[str, Any]:
        net = {"id": new_id(), "project_id": project_id, "shared": shared, "mtu": mtu,
               "subnet": "10.0.0"}
        self.networks_by_id[net["id"]] = net
        return net

    def add_port(self, network: dict[str, Any], project_id: str = DEMO,
                 device_id: str = "", **fields: Any) -> dict[str, Any]:
        return self._make({"network_id": network["id"], "project_id": project_id,
                           "device_id": device_id, "device_owner": "", **fields})

    def _make(self, body: dict[str, Any]) -> dict[str, Any]:
        number = len(self.ports_by_id) + 1
        network = self.networks_by_id[body["network_id"]]
        port = {"id": new_id(), "mac_address": f"fa:16:3e:00:00:{number:02x}",
                "status": "DOWN", "revision_number": 1, "device_id": "", "device_owner": "",
                "binding:host_id": "",
                "fixed_ips": [{"ip_address": f"{network['subnet']}.{10 + number}"}], **body}
        for fixed in body.get("fixed_ips") or []:
            taken = [p for p in self.ports_by_id.values() if p["network_id"] == network["id"]
                     and fixed in p["fixed_ips"]]
            if taken:
                raise NeutronError("Neutron POST /ports: 409 IP address "
                                   f"{fixed['ip_address']} already allocated", 409,
                                   "IpAddressAlreadyAllocated")
        self.ports_by_id[port["id"]] = port
        return copy.deepcopy(port)

    # --- the client's methods ------------------------------------------------------

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        self._counts[name] = count = self._counts.get(name, 0) + 1
        if self.down or count >= self.fail_from.get(name, count + 1):
            raise NeutronUnavailable("Neutron: http://neutron.invalid is unreachable "
                                     "(ConnectFailure)")

    def network(self, network_id: str) -> dict[str, Any]:
        self._call("network", network_id)
        if network_id not in self.networks_by_id:
            raise NotFound(f"Neutron GET /networks/{network_id}: Network not found")
        return copy.deepcopy(self.networks_by_id[network_id])

    def networks(self, **filters: Any) -> list[dict[str, Any]]:
        self._call("networks", filters)
        return [copy.deepcopy(n) for n in self.networks_by_id.values() if _matches(n, filters)]

    def security_groups(self, **filters: Any) -> list[dict[str, Any]]:
        self._call("security_groups", filters)
        return [g for g in self.groups if _matches(g, filters)]

    def port(self, port_id: str) -> dict[str, Any]:
        self._call("port", port_id)
        if port_id not in self.ports_by_id:
            raise NotFound(f"Neutron GET /ports/{port_id}: Port not found")
        return copy.deepcopy(self.ports_by_id[port_id])

    def ports(self, **filters: Any) -> list[dict[str, Any]]:
        self._call("ports", filters)
        return [copy.deepcopy(p) for p in self.ports_by_id.values() if _matches(p, filters)]

    def create_port(self, port: dict[str, Any]) -> dict[str, Any]:
        self._call("create_port", port)
        return self._make(dict(port))

    def update_port(self, port_id: str, changes: dict[str, Any],
                    revision: int | None = None) -> dict[str, Any]:
        self._call("update_port", port_id, changes, revision)
        port = self.ports_by_id.get(port_id)
        if port is None:
            raise NotFound(f"Neutron PUT /ports/{port_id}: Port not found")
        if revision is not None and revision != port["revision_number"]:
            raise NeutronError(f"Neutron PUT /ports/{port_id}: 412 revision number mismatch",
                               412, "RevisionNumberConstraintFailed")
        port.update(changes)
        port["revision_number"] += 1
        return copy.deepcopy(port)

    def delete_port(self, port_id: str) -> bool:
        self._call("delete_port", port_id)
        self.inactive.pop(port_id, None)
        return self.ports_by_id.pop(port_id, None) is not None

    # --- port bindings (binding-extended): one per host, the port's own the active one -

    def _bound_port(self, method: str, port_id: str) -> dict[str, Any]:
        port = self.ports_by_id.get(port_id)
        if port is None:
            raise NotFound(f"Neutron {method} /ports/{port_id}/bindings: Port not found")
        return port

    def port_bindings(self, port_id: str) -> list[dict[str, Any]]:
        self._call("port_bindings", port_id)
        port = self._bound_port("GET", port_id)
        active = [{"host": port["binding:host_id"], "status": "ACTIVE",
                   "profile": port.get("binding:profile") or {}}] \
            if port["binding:host_id"] else []
        return active + [copy.deepcopy(b) for b in self.inactive.get(port_id, {}).values()]

    def create_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        self._call("create_port_binding", port_id, host)
        port = self._bound_port("POST", port_id)
        if host == port["binding:host_id"] or host in self.inactive.get(port_id, {}):
            raise NeutronError(f"Neutron POST /ports/{port_id}/bindings: 409 binding for "
                               f"host {host} already exists", 409, "PortBindingAlreadyExists")
        binding = {"host": host, "status": "INACTIVE", "profile": {}}
        self.inactive.setdefault(port_id, {})[host] = binding
        return copy.deepcopy(binding)

    def activate_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        self._call("activate_port_binding", port_id, host)
        port = self._bound_port("PUT", port_id)
        if host == port["binding:host_id"]:
            raise NeutronError(f"Neutron PUT /ports/{port_id}/bindings/{host}/activate: 409 "
                               "already active", 409, "PortBindingAlreadyActive")
        binding = self.inactive.get(port_id, {}).pop(host, None)
        if binding is None:
            raise NotFound(f"Neutron PUT /ports/{port_id}/bindings/{host}/activate: "
                           "Binding not found")
        if port["binding:host_id"]:
            self.inactive[port_id][port["binding:host_id"]] = {
                "host": port["binding:host_id"], "status": "INACTIVE",
                "profile": port.get("binding:profile") or {}}
        port.update({"binding:host_id": host, "binding:profile": binding["profile"]})
        port["revision_number"] += 1
        return {**binding, "status": "ACTIVE"}

    def delete_port_binding(self, port_id: str, host: str) -> bool:
        """Only an inactive one: a test that deletes the active binding is wrong."""
        self._call("delete_port_binding", port_id, host)
        port = self._bound_port("DELETE", port_id)
        assert host != port["binding:host_id"], f"the active binding of {port_id} deleted"
        return self.inactive.get(port_id, {}).pop(host, None) is not None

    # --- what a test asks -----------------------------------------------------------

    def of_device(self, device_id: str) -> list[dict[str, Any]]:
        return [p for p in self.ports_by_id.values() if p["device_id"] == device_id]

    def mutations(self) -> list[str]:
        return [name for name, _ in self.calls
                if name in ("create_port", "update_port", "delete_port", "create_port_binding",
                            "activate_port_binding", "delete_port_binding")]


def _matches(item: dict[str, Any], filters: dict[str, Any]) -> bool:
    for key, wanted in filters.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        if item.get(key) not in values:
            return False
    return True
