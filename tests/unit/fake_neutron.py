"""A small Neutron in memory for unit tests: networks, subnets, ports and security groups,
with the NeutronClient's methods and errors (etcd_compute/neutron.py), seen by a caller as
Neutron's default policy lets it see them:

- `as_caller(project, is_admin)`: a user's token (the compute API's callers): its
  project's, shared and external networks; everything to an admin.
- `service()`: the compute's service credential (the `service` role, as Nova's): every
  project's networks, subnets and ports, which it may make, bind and delete for a project
  (compute/ports.py); but no project's security groups, which Neutron's policy shows only
  to an admin or the project (`service_reads_groups`: a deployment whose service user may).

Neutron's refusals: a fixed IP taken (409), a revision mismatch (412), a security group
that is not the port's project's (404, checked as Neutron checks it when a port is made
or changed). `down` is an outage (every call raises NeutronUnavailable, as the client
does when Neutron cannot be reached); `fail_from` fails calls by method name from the
n-th on. Every request is recorded (`calls`: method, collection, what it named)."""

from __future__ import annotations

import copy
import ipaddress
import uuid as uuidlib
from typing import Any

from etcd_compute.errors import NeutronError, NeutronUnavailable, NotFound

_COLLECTIONS = ("networks", "subnets", "ports", "security_groups", "floatingips")
DEMO, ALT, SERVICE = "demo-project", "alt-project", "service-project"


class FakeNeutron:
    def __init__(self, service_reads_groups: bool = False) -> None:
        self.items: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in _COLLECTIONS}
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.service_reads_groups = service_reads_groups
        # A port's inactive bindings, by host (its active one is its binding:host_id).
        self.inactive: dict[str, dict[str, dict[str, Any]]] = {}
        self.down = False
        # Calls (by the client's method name) that fail from the n-th on: {"create_port": 2}.
        self.fail_from: dict[str, int] = {}
        self.counts: dict[str, int] = {}
        self._macs = 0
        # Each project's port quota (Neutron's default: 500; -1 is unlimited).
        self.port_quotas: dict[str, int] = {}

    # --- what a test sets up ---------------------------------------------------------

    def add_network(self, project: str = DEMO, name: str = "net",
                    cidr: str | None = "10.0.0.0/24", shared: bool = False,
                    external: bool = False, mtu: int = 1442) -> dict[str, Any]:
        net = {"id": str(uuidlib.uuid4()), "name": name, "project_id": project,
               "tenant_id": project, "shared": shared, "router:external": external,
               "subnets": [], "status": "ACTIVE", "admin_state_up": True, "mtu": mtu}
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
                "security_groups": list(security_groups or []), "binding:host_id": "",
                "revision_number": 1, "port_security_enabled": True, **more}
        self.items["ports"][port["id"]] = port
        return copy.deepcopy(port)  # a copy, as Neutron answers; a test changes `items`

    def add_floating_ip(self, port: dict[str, Any], address: str) -> dict[str, Any]:
        found = {"id": str(uuidlib.uuid4()), "floating_ip_address": address,
                 "port_id": port["id"], "fixed_ip_address": port["fixed_ips"][0]["ip_address"],
                 "project_id": port["project_id"], "tenant_id": port["project_id"]}
        self.items["floatingips"][found["id"]] = found
        return found

    def as_caller(self, project_id: str, is_admin: bool = False) -> FakeNeutronClient:
        return FakeNeutronClient(self, project_id, is_admin)

    def service(self) -> FakeNeutronClient:
        """The compute's client: the service user, of the service role."""
        return FakeNeutronClient(self, SERVICE, False, service=True)

    # --- what a test asks -----------------------------------------------------------

    def of_device(self, device_id: str) -> list[dict[str, Any]]:
        return [p for p in self.items["ports"].values() if p["device_id"] == device_id]

    def mutations(self) -> list[tuple[str, str, dict[str, Any]]]:
        return [call for call in self.calls if call[0] != "GET"]


class FakeNeutronClient:
    """The NeutronClient of one caller's token: it sees what Neutron's default policy shows
    it (its project's; shared and external networks; everything to an admin; all but the
    security groups to the service role)."""

    def __init__(self, neutron: FakeNeutron, project_id: str, is_admin: bool,
                 service: bool = False):
        self.neutron, self.project_id, self.is_admin = neutron, project_id, is_admin
        self.service = service

    def _visible(self, collection: str, item: dict[str, Any]) -> bool:
        if self.is_admin or item["project_id"] == self.project_id:
            return True
        if self.service and (collection != "security_groups" or
                             self.neutron.service_reads_groups):
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

    def _record(self, name: str, method: str, collection: str, detail: dict[str, Any]) -> None:
        """The request recorded; an outage (`down`, `fail_from`) raises as the client does."""
        neutron = self.neutron
        neutron.calls.append((method, collection, detail))
        neutron.counts[name] = count = neutron.counts.get(name, 0) + 1
        if neutron.down or count >= neutron.fail_from.get(name, count + 1):
            raise NeutronUnavailable("Neutron: http://neutron.invalid is unreachable "
                                     "(ConnectFailure)")

    def connect(self) -> None:
        self._record("connect", "GET", "extensions", {"id": "binding-extended"})

    def _list(self, collection: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        self._record(collection, "GET", collection, dict(filters))
        wanted = {k: v for k, v in filters.items() if k != "fields"}
        return [copy.deepcopy(item) for item in self.neutron.items[collection].values()
                if self._visible(collection, item) and
                all(self._matches(item, k, v) for k, v in wanted.items())]

    def _one(self, collection: str, item_id: str) -> dict[str, Any]:
        self._record(collection.removesuffix("s"), "GET", collection, {"id": item_id})
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

    def port_quota(self, project_id: str) -> int:
        self._record("quota", "GET", "quotas", {"id": project_id})
        if not (self.is_admin or project_id == self.project_id):
            raise NotFound(f"Neutron GET /quotas/{project_id}: not found")
        return self.neutron.port_quotas.get(project_id, 500)

    def ports(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("ports", filters)

    def _check_groups(self, port: dict[str, Any], groups: list[str], what: str) -> None:
        """Neutron's own check of a port's groups: each the port's project's (or any, to an
        admin); else 404 SecurityGroupNotFound."""
        for group in groups:
            found = self.neutron.items["security_groups"].get(group)
            if found is None or not (self.is_admin or
                                     found["project_id"] == port["project_id"]):
                raise NeutronError(f"Neutron {what}: 404 Security group {group} does not "
                                   "exist", 404, "SecurityGroupNotFound")

    def create_port(self, body: dict[str, Any]) -> dict[str, Any]:
        self._record("create_port", "POST", "ports", dict(body))
        network = self.neutron.items["networks"].get(body["network_id"])
        if network is None or not self._visible("networks", network):
            raise NotFound(f"Neutron POST /ports: network {body['network_id']} not found")
        fields = {k: v for k, v in body.items() if k not in ("network_id", "fixed_ips")}
        fields.setdefault("project_id", self.project_id)
        if fields["project_id"] != self.project_id and not (self.is_admin or self.service):
            raise NeutronError("Neutron POST /ports: 403 project_id", 403, "PolicyNotAuthorized")
        self._check_groups(fields, fields.get("security_groups") or [], "POST /ports")
        ip = None
        for fixed in body.get("fixed_ips") or []:
            ip = fixed["ip_address"]
            if any(f["ip_address"] == ip for p in self.neutron.items["ports"].values()
                   if p["network_id"] == network["id"] for f in p["fixed_ips"]):
                raise NeutronError(f"Neutron POST /ports: 409 IP address {ip} already "
                                   "allocated", 409, "IpAddressAlreadyAllocated")
        project, device = fields.pop("project_id"), fields.pop("device_id", "")
        port = self.neutron.add_port(network, project, device, ip,
                                     fields.pop("security_groups", None),
                                     **{"status": "DOWN", "device_owner": "", **fields})
        return copy.deepcopy(port)

    def update_port(self, port_id: str, changes: dict[str, Any],
                    revision: int | None = None) -> dict[str, Any]:
        self._record("update_port", "PUT", "ports",
                     {"id": port_id, **changes, "revision": revision})
        port = self.neutron.items["ports"].get(port_id)
        if port is None or not self._visible("ports", port):
            raise NotFound(f"Neutron PUT /ports/{port_id}: not found")
        if revision is not None and revision != port["revision_number"]:
            raise NeutronError(f"Neutron PUT /ports/{port_id}: 412 revision number mismatch",
                               412, "RevisionNumberConstraintFailed")
        self._check_groups(port, changes.get("security_groups") or [],
                           f"PUT /ports/{port_id}")
        port.update(copy.deepcopy(changes))
        port["revision_number"] += 1
        return copy.deepcopy(port)

    def delete_port(self, port_id: str) -> bool:
        self._record("delete_port", "DELETE", "ports", {"id": port_id})
        port = self.neutron.items["ports"].get(port_id)
        if port is None or not self._visible("ports", port):
            return False
        del self.neutron.items["ports"][port_id]
        self.neutron.inactive.pop(port_id, None)
        return True

    # --- port bindings (binding-extended): one per host, the port's own the active one -

    def _bound_port(self, name: str, method: str, port_id: str) -> dict[str, Any]:
        self._record(name, method, "bindings", {"port_id": port_id})
        port = self.neutron.items["ports"].get(port_id)
        if port is None or not self._visible("ports", port):
            raise NotFound(f"Neutron {method} /ports/{port_id}/bindings: Port not found")
        return port

    def port_bindings(self, port_id: str) -> list[dict[str, Any]]:
        port = self._bound_port("port_bindings", "GET", port_id)
        active = [{"host": port["binding:host_id"], "status": "ACTIVE",
                   "profile": port.get("binding:profile") or {}}] \
            if port["binding:host_id"] else []
        return active + [copy.deepcopy(b)
                         for b in self.neutron.inactive.get(port_id, {}).values()]

    def create_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        port = self._bound_port("create_port_binding", "POST", port_id)
        if host == port["binding:host_id"] or host in self.neutron.inactive.get(port_id, {}):
            raise NeutronError(f"Neutron POST /ports/{port_id}/bindings: 409 binding for "
                               f"host {host} already exists", 409, "PortBindingAlreadyExists")
        binding = {"host": host, "status": "INACTIVE", "profile": {}}
        self.neutron.inactive.setdefault(port_id, {})[host] = binding
        return copy.deepcopy(binding)

    def activate_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        port = self._bound_port("activate_port_binding", "PUT", port_id)
        if host == port["binding:host_id"]:
            raise NeutronError(f"Neutron PUT /ports/{port_id}/bindings/{host}/activate: 409 "
                               "already active", 409, "PortBindingAlreadyActive")
        binding = self.neutron.inactive.get(port_id, {}).pop(host, None)
        if binding is None:
            raise NotFound(f"Neutron PUT /ports/{port_id}/bindings/{host}/activate: "
                           "Binding not found")
        if port["binding:host_id"]:
            self.neutron.inactive[port_id][port["binding:host_id"]] = {
                "host": port["binding:host_id"], "status": "INACTIVE",
                "profile": port.get("binding:profile") or {}}
        port.update({"binding:host_id": host, "binding:profile": binding["profile"]})
        port["revision_number"] += 1
        return {**binding, "status": "ACTIVE"}

    def delete_port_binding(self, port_id: str, host: str) -> bool:
        """Only an inactive one: a test that deletes the active binding is wrong."""
        port = self._bound_port("delete_port_binding", "DELETE", port_id)
        assert host != port["binding:host_id"], f"the active binding of {port_id} deleted"
        return self.neutron.inactive.get(port_id, {}).pop(host, None) is not None

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
        self._record(f"create_{collection}", "POST", collection, dict(item))
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
        self._record(f"update_{collection}", "PUT", collection, {"id": item_id, **changes})
        self._one(collection, item_id)
        self.neutron.items[collection][item_id].update(copy.deepcopy(changes))
        return copy.deepcopy(self.neutron.items[collection][item_id])

    def delete(self, collection: str, item_id: str) -> None:
        self._record(f"delete_{collection}", "DELETE", collection, {"id": item_id})
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
