"""A small Neutron in memory for unit tests: networks, subnets, ports and security groups,
seen by a caller as Neutron's default policy lets it see them (`as_caller`), with the
NeutronClient's methods and errors. Every request is recorded (`calls`), so a test can count
them."""

from __future__ import annotations

import copy
import ipaddress
import uuid as uuidlib
from typing import Any

from etcd_compute.errors import NeutronError, NotFound

_COLLECTIONS = ("networks", "subnets", "ports", "security_groups", "floatingips")


class FakeNeutron:
    def __init__(self) -> None:
        self.items: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in _COLLECTIONS}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self._macs = 0

    # --- what a test sets up ---------------------------------------------------------

    def add_network(self, project: str, name: str = "net", cidr: str | None = "10.0.0.0/24",
                    shared: bool = False, external: bool = False) -> dict[str, Any]:
        net = {"id": str(uuidlib.uuid4()), "name": name, "project_id": project,
               "tenant_id": project, "shared": shared, "router:external": external,
               "subnets": [], "status": "ACTIVE", "admin_state_up": True}
        self.items["networks"][net["id"]] = net
        if cidr:
            subnet = {"id": str(uuidlib.uuid4()), "network_id": net["id"], "cidr": cidr,
                      "ip_version": ipaddress.ip_network(cidr).version, "project_id": project}
            self.items["subnets"][subnet["id"]] = subnet
            net["subnets"].append(subnet["id"])
        return net

    def add_group(self, project: str, name: str = "default",
                  rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        group = {"id": str(uuidlib.uuid4()), "name": name, "description": f"{name} group",
                 "project_id": project, "tenant_id": project, "security_group_rules": []}
        for rule in rules or []:
            group["security_group_rules"].append({
                "id": str(uuidlib.uuid4()), "security_group_id": group["id"],
                "direction": "ingress", "ethertype": "IPv4", "protocol": None,
                "port_range_min": None, "port_range_max": None, "remote_group_id": None,
                "remote_ip_prefix": None, **rule})
        self.items["security_groups"][group["id"]] = group
        return group

    def add_port(self, network: dict[str, Any], project: str | None = None,
                 device_id: str = "", ip: str | None = None,
                 security_groups: list[str] | None = None, **more: Any) -> dict[str, Any]:
        subnets = [self.items["subnets"][s] for s in network["subnets"]]
        fixed = []
        if subnets:
            hosts = ipaddress.ip_network(subnets[0]["cidr"]).hosts()
            taken = {f["ip_address"] for p in self.items["ports"].values()
                     for f in p["fixed_ips"]}
            address = ip or next(str(h) for h in hosts if str(h) not in taken and
                                 not str(h).endswith(".1"))
            fixed = [{"subnet_id": subnets[0]["id"], "ip_address": address}]
        self._macs += 1
        port = {"id": str(uuidlib.uuid4()), "network_id": network["id"],
                "project_id": project or network["project_id"],
                "tenant_id": project or network["project_id"],
                "device_id": device_id, "device_owner": "compute:nova" if device_id else "",
                "mac_address": f"fa:16:3e:00:00:{self._macs:02x}", "fixed_ips": fixed,
                "status": "ACTIVE" if device_id else "DOWN",
                "security_groups": list(security_groups or []),
                "port_security_enabled": True, **more}
        self.items["ports"][port["id"]] = port
        return port

    def add_floating_ip(self, port: dict[str, Any], address: str) -> dict[str, Any]:
        found = {"id": str(uuidlib.uuid4()), "floating_ip_address": address,
                 "port_id": port["id"], "fixed_ip_address": port["fixed_ips"][0]["ip_address"],
                 "project_id": port["project_id"], "tenant_id": port["project_id"]}
        self.items["floatingips"][found["id"]] = found
        return found

    def as_caller(self, project_id: str, is_admin: bool = False) -> FakeNeutronClient:
        return FakeNeutronClient(self, project_id, is_admin)


class FakeNeutronClient:
    """The NeutronClient of one caller's token: it sees what Neutron's default policy shows
    it (its project's; shared and external networks; everything to an admin)."""

    def __init__(self, neutron: FakeNeutron, project_id: str, is_admin: bool):
        self.neutron, self.project_id, self.is_admin = neutron, project_id, is_admin

    def _visible(self, collection: str, item: dict[str, Any]) -> bool:
        if self.is_admin or item["project_id"] == self.project_id:
            return True
        if collection == "networks":
            return bool(item["shared"] or item["router:external"])
        if collection == "subnets":
            return self._visible("networks", self.neutron.items["networks"][item["network_id"]])
        return False

    @staticmethod
    def _matches(item: dict[str, Any], name: str, wanted: Any) -> bool:
        if name == "fixed_ips":
            address = str(wanted).removeprefix("ip_address=")
            return any(f["ip_address"] == address for f in item["fixed_ips"])
        value = item.get(name)
        if isinstance(wanted, list):
            return value in wanted
        if isinstance(value, bool):
            return str(value).lower() == str(wanted).lower()
        return value == wanted

    def _list(self, collection: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self.neutron.calls.append(("GET", collection, dict(filters)))
        wanted = {k: v for k, v in filters.items() if k != "fields"}
        return [copy.deepcopy(item) for item in self.neutron.items[collection].values()
                if self._visible(collection, item) and
                all(self._matches(item, k, v) for k, v in wanted.items())]

    def _one(self, collection: str, item_id: str) -> dict[str, Any]:
        self.neutron.calls.append(("GET", collection, {"id": item_id}))
        item = self.neutron.items[collection].get(item_id)
        if item is None or not self._visible(collection, item):
            raise NotFound(f"Neutron GET /{collection}/{item_id}: not found")
        return copy.deepcopy(item)

    def network(self, network_id: str) -> dict[str, Any]:
        return self._one("networks", network_id)

    def networks(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("networks", filters)

    def subnets(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("subnets", filters)

    def security_groups(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("security_groups", filters)

    def floating_ips(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("floatingips", filters)

    def port(self, port_id: str) -> dict[str, Any]:
        return self._one("ports", port_id)

    def ports(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("ports", filters)

    def update_port(self, port_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        self.neutron.calls.append(("PUT", "ports", {"id": port_id, **changes}))
        port = self.neutron.items["ports"].get(port_id)
        if port is None or not self._visible("ports", port):
            raise NotFound(f"Neutron PUT /ports/{port_id}: not found")
        for group in changes.get("security_groups") or []:
            if group not in self.neutron.items["security_groups"]:
                raise NeutronError(f"Neutron PUT /ports/{port_id}: 404 group", 404,
                                   "SecurityGroupNotFound")
        port.update(copy.deepcopy(changes))
        return copy.deepcopy(port)

    # --- security groups and rules (the compute API's proxy) ---------------------------

    def security_group(self, group_id: str) -> dict[str, Any]:
        return self._one("security_groups", group_id)

    def security_group_rule(self, rule_id: str) -> dict[str, Any]:
        for group in self.neutron.items["security_groups"].values():
            for rule in group["security_group_rules"]:
                if rule["id"] == rule_id and self._visible("security_groups", group):
                    return copy.deepcopy(rule)
        raise NotFound(f"Neutron GET /security_group_rules/{rule_id}: not found")

    def create(self, collection: str, item: dict[str, Any]) -> dict[str, Any]:
        self.neutron.calls.append(("POST", collection, dict(item)))
        if collection == "security_groups":
            made = self.neutron.add_group(self.project_id, item["name"])
            made["description"] = item.get("description", "")
            return copy.deepcopy(made)
        group = self.neutron.items["security_groups"][item["security_group_id"]]
        keys = ("protocol", "port_range_min", "port_range_max", "remote_ip_prefix",
                "remote_group_id", "ethertype")
        for rule in group["security_group_rules"]:
            if all(rule.get(k) == item.get(k) for k in keys):
                raise NeutronError("Neutron POST /security_group_rules: 409 exists", 409,
                                   "SecurityGroupRuleExists")
        rule = {"id": str(uuidlib.uuid4()), "protocol": None, "port_range_min": None,
                "port_range_max": None, "remote_group_id": None, "remote_ip_prefix": None,
                **item}
        group["security_group_rules"].append(rule)
        return copy.deepcopy(rule)

    def update(self, collection: str, item_id: str, changes: dict[str, Any]
               ) -> dict[str, Any]:
        self.neutron.calls.append(("PUT", collection, {"id": item_id, **changes}))
        self._one(collection, item_id)
        self.neutron.items[collection][item_id].update(copy.deepcopy(changes))
        return copy.deepcopy(self.neutron.items[collection][item_id])

    def delete(self, collection: str, item_id: str) -> None:
        self.neutron.calls.append(("DELETE", collection, {"id": item_id}))
        if collection == "security_group_rules":
            for group in self.neutron.items["security_groups"].values():
                group["security_group_rules"] = [
                    r for r in group["security_group_rules"] if r["id"] != item_id]
            return
        self._one(collection, item_id)
        if any(item_id in port["security_groups"]
               for port in self.neutron.items["ports"].values()):
            raise NeutronError(f"Neutron DELETE /security_groups/{item_id}: 409 in use", 409,
                               "SecurityGroupInUse")
        del self.neutron.items[collection][item_id]
