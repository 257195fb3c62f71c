"""GET /servers and /servers/detail: Nova's filters, sorting, limit/marker and links.

Members see their project's servers; admins may ask for every project's (all_tenants)
and filter by more (`allow_all_filters`). Filters a member may not use are dropped, as
Nova drops them; from 2.75 an unknown parameter is 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects import server_security_groups as server_groups
from etcd_compute.api.objects.server_ports import ServerPorts
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.schemas import servers as schema
from etcd_compute.api.schemas.parameter_types import TRUE_STRINGS, is_true
from etcd_compute.api.views import ports as port_view
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import ApiRequest, Fault, bad_request, json_response

TAG_FILTERS = ("tags", "tags-any", "not-tags", "not-tags-any")
JOINED = ("block_device_mapping", "services", "metadata", "system_metadata", "info_cache",
          "security_groups", "pci_devices")
FALSE_STRINGS = ("false", "0", "off", "no", "n", "f")


def member_filters(req: ApiRequest) -> tuple[str, ...]:
    """The filters a member may use at this version (Nova's `_get_server_search_options`)."""
    allowed: tuple[str, ...] = ("reservation_id", "name", "status", "image", "flavor", "ip",
                                "changes-since", "all_tenants")
    for since, more in (("2.5", ("ip6",)), ("2.26", TAG_FILTERS),
                        ("2.66", ("changes-before",)), ("2.73", ("locked",)),
                        ("2.83", ("availability_zone", "config_drive", "key_name",
                                  "created_at", "launched_at", "terminated_at",
                                  "power_state", "task_state", "vm_state", "progress",
                                  "user_id"))):
        if req.version.at_least(since):
            allowed += more
    return allowed


def _value(server: Server, name: str) -> Any:
    """A server's value for a filter or sort key of Nova's."""
    doc, record = server.doc, server.record or {}
    vm_state, task_state, power_state = view.nova_states(server)
    return {
        "uuid": server.uuid, "display_name": doc["name"], "name": doc["name"],
        "display_description": doc.get("description") or "",
        "description": doc.get("description") or "", "project_id": server.project_id,
        "user_id": doc["user_id"], "created_at": doc["created_at"],
        "updated_at": server.updated_at, "host": record.get("host_name") or "",
        "node": record.get("host_name") or "", "hostname": doc.get("hostname") or "",
        "key_name": doc.get("key_name") or "", "image_ref": (doc.get("image") or {}).get("id"),
        "instance_type_id": view.flavor_of(server).get("id"),
        "availability_zone": doc.get("availability_zone") or "",
        "launch_index": doc.get("launch_index", 0),
        "reservation_id": doc.get("reservation_id") or "", "vm_state": vm_state,
        "task_state": task_state or "", "power_state": power_state,
        "access_ip_v4": doc.get("access_ip_v4") or "",
        "access_ip_v6": doc.get("access_ip_v6") or "", "config_drive": "True",
        "kernel_id": "", "ramdisk_id": "", "root_device_name": "/dev/vda",
        "auto_disk_config": "False", "locked": bool(doc.get("lock")),
        "locked_by": (doc.get("lock") or {}).get("by") or "",
        "progress": 100 if vm_state == "active" else 0, "ip": record.get("ip") or "",
        "launched_at": "", "terminated_at": "",
    }.get(name)


def _matches(server: Server, name: str, wanted: str) -> bool:
    """Nova's semantics per filter: regular expressions, exact values, lists."""
    if name in ("name", "display_name", "description", "display_description", "hostname",
                "key_name", "node", "reservation_id", "availability_zone", "kernel_id",
                "ramdisk_id", "root_device_name", "access_ip_v4", "access_ip_v6",
                "locked_by", "config_drive", "auto_disk_config", "progress",
                "launched_at", "terminated_at", "created_at", "power_state", "ip", "ip6"):
        value = "" if name == "ip6" else _value(server, "ip" if name == "ip" else name)
        return re.search(wanted, str(value)) is not None
    if name in ("image", "image_ref"):
        return str(_value(server, "image_ref")) == wanted.rstrip("/").rsplit("/", 1)[-1] or \
            str(_value(server, "image_ref")) == wanted
    if name == "flavor":
        return str(_value(server, "instance_type_id")) == wanted.rsplit("/", 1)[-1]
    if name in ("host", "uuid", "user_id", "project_id", "vm_state", "task_state",
                "launch_index"):
        return str(_value(server, name)) == wanted
    tags = set(server.doc.get("tags") or [])
    asked = set(wanted.split(","))
    return {"tags": asked <= tags, "tags-any": bool(asked & tags),
            "not-tags": not asked <= tags, "not-tags-any": not asked & tags}.get(name, True)


def _sort(servers: list[Server], req: ApiRequest) -> list[Server]:
    keys = req.GET.getall("sort_key")
    dirs = req.GET.getall("sort_dir")
    ignored = [] if req.version.at_least("2.75") else list(schema.IGNORED_SORT_KEYS)
    if req.version.at_least("2.73") and "locked" in ignored:
        ignored.remove("locked")
    pairs = []
    for index, key in enumerate(keys):
        direction = dirs[index] if index < len(dirs) else (dirs[0] if dirs else "desc")
        if key in ignored:
            continue
        if key in ("host", "node") and not req.context.is_admin:
            raise Fault(403, f"Only administrators can sort servers by {key}")
        if direction not in ("asc", "desc"):
            raise bad_request(f"Invalid sort direction: {direction[:20]}")
        pairs.append((key, direction))
    if not pairs:
        pairs = [("created_at", "desc")]
    ordered = sorted(servers, key=lambda s: s.uuid, reverse=pairs[0][1] == "desc")
    for key, direction in reversed(pairs):
        ordered.sort(key=lambda s, k=key: _sortable(_value(s, k)), reverse=direction == "desc")
    return ordered


def _sortable(value: Any) -> tuple[int, Any]:
    if value is None or value == "":
        return (0, "")
    return (1, value) if isinstance(value, int | float) else (2, str(value))


def _status_filter(req: ApiRequest) -> Callable[[Server], bool] | None:
    statuses = [s.upper() for s in req.GET.getall("status")]
    if not statuses:
        return None
    known = [s for s in statuses if s in view.STATUSES]
    if not known:
        if req.version.at_least("2.38"):
            raise bad_request("Invalid status value")
        return lambda _server: False
    return lambda server: view.status(server) in known


def search(api: Backend, req: ApiRequest, detail: bool) -> list[Server]:
    """The servers the request asks for, filtered and sorted (not paged)."""
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    # Nova's index and detail ask their rule after the query's schema, of the caller's project.
    api.policy.authorize(req.context, policy.SERVERS % ("detail" if detail else "index"))
    options = {name: values[-1] for name, values in params.items()}
    if not api.policy.allows(req.context, policy.SERVERS % "allow_all_filters"):
        options = {k: v for k, v in options.items() if k in member_filters(req)}
    for name in options:
        if name in JOINED or name.startswith("_"):
            raise bad_request(f"Invalid filter field: {name}.")
    all_tenants = False
    if "all_tenants" in options:
        raw = options.pop("all_tenants").strip().lower()
        if raw not in ("", *TRUE_STRINGS, *FALSE_STRINGS):
            raise bad_request(f"Invalid all_tenants value: {raw[:20]}")
        all_tenants = raw == "" or raw in TRUE_STRINGS
    if all_tenants:
        api.policy.authorize(req.context, policy.SERVERS % (
            "detail:get_all_tenants" if detail else "index:get_all_tenants"))
        project = options.pop("project_id", None) or options.pop("tenant_id", None)
    else:
        options.pop("project_id", None)
        options.pop("tenant_id", None)
        project = req.context.project_id
    since = before = None
    for name in ("changes-since", "changes-before"):
        raw = options.pop(name, None)
        if raw is not None:
            parsed = validation.parse_time(raw)
            if parsed is None:
                raise bad_request(f"Invalid filter field: {name}.")
            since, before = (parsed, before) if name == "changes-since" else (since, parsed)
    if since is not None and before is not None and before < since:
        raise bad_request("The value of changes-since must be less than or equal to "
                          "changes-before.")
    deleted = options.pop("deleted", None)
    options.pop("soft_deleted", None)
    status = _status_filter(req) if "status" in options else None
    options.pop("status", None)
    locked = options.pop("locked", None)
    for name in ("limit", "marker", "sort_key", "sort_dir"):
        options.pop(name, None)
    by_port = {name: options.pop(name) for name in ("ip", "ip6") if name in options} \
        if api.neutron is not None else {}
    servers = api.servers.list(project)
    if deleted is not None and is_true(deleted):
        servers = []  # ended instances are forgotten: there are no deleted ones to show
    if locked is not None:
        servers = [s for s in servers if bool(s.doc.get("lock")) == is_true(locked)]
    if status is not None:
        servers = [s for s in servers if status(s)]
    if since is not None:
        servers = [s for s in servers if s.updated_at >= since]
    if before is not None:
        servers = [s for s in servers if s.updated_at <= before]
    for name, wanted in options.items():
        servers = [s for s in servers if _matches(s, name, wanted)]
    if by_port and servers:
        servers = _by_port_address(api, req, servers, by_port)
    return _sort(servers, req)


def _by_port_address(api: Backend, req: ApiRequest, servers: list[Server],
                     wanted: dict[str, str]) -> list[Server]:
    """The neutron backend's ip and ip6 filters, as Nova's `_ip_filter`: a server with a
    port's fixed IPv4 address matching `ip` or an IPv6 one matching `ip6` (one request for
    the ports of every server left)."""
    patterns = {4: re.compile(wanted["ip"]) if "ip" in wanted else None,
                6: re.compile(wanted["ip6"]) if "ip6" in wanted else None}
    ports = ServerPorts.of(api.neutron(req.context), [s.uuid for s in servers],
                           names=False)
    matching = set()
    for port in ports.ports:
        for fixed in port.get("fixed_ips") or []:
            address = fixed["ip_address"]
            pattern = patterns[6 if ":" in address else 4]
            if pattern is not None and pattern.match(address):
                matching.add(port["device_id"])
    return [s for s in servers if s.uuid in matching]


def index(api: Backend, req: ApiRequest, detail: bool) -> webob.Response:
    servers = search(api, req, detail)
    limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
    shown = paging.page(servers, lambda s: s.uuid, limit, marker)
    if detail:
        body = {"servers": render_detail(api, req, shown)}
    else:
        body = {"servers": [view.basic(req, s) for s in shown]}
    links = paging.next_links(req, shown, lambda s: s.uuid,
                              "servers/detail" if detail else "servers",
                              api.settings["max_limit"])
    if links:
        body["servers_links"] = links
    return json_response(body)


def render_detail(api: Backend, req: ApiRequest, servers: list[Server]) -> list[dict[str, Any]]:
    """The detailed view of each (policies and host states looked up once)."""
    context = req.context
    extended = api.policy.allows(context, policy.EXTENDED_ATTRIBUTES)
    extra_specs = req.version.at_least("2.47") and \
        api.policy.allows(context, policy.SERVERS % "show:flavor-extra-specs")
    shows_host = req.version.at_least("2.16") and \
        api.policy.allows(context, policy.SERVERS % "show:host_status")
    statuses = api.servers.host_status({s.host for s in servers if s.host}) if shows_host \
        else {}
    ports, groups = None, {}
    if api.neutron is not None:  # the ports of the page, their networks and groups
        neutron = api.neutron(context)
        ports = ServerPorts.of(neutron, [s.uuid for s in servers])
        groups = server_groups.names(neutron, ports)
    return [view.show(req, s, network=api.settings["network_name"], show_extended=extended,
                      show_extra_specs=extra_specs, is_admin=context.is_admin,
                      host_status=statuses.get(s.host or "", "") if shows_host else None,
                      availability_zone=availability_zone(api, s),
                      addresses=None if ports is None else
                      port_view.addresses(ports.of_server(s.uuid), ports.network_name,
                                          ports.floating),
                      groups=None if ports is None else groups.get(s.uuid, []))
            for s in servers]


def availability_zone(api: Backend, server: Server) -> str:
    """The zone a server is in: the one it asked for, else the default one."""
    return str(server.doc.get("availability_zone") or
               api.settings["default_availability_zone"])
