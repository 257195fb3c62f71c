"""/servers (Nova's servers controller): create, show, update, delete; lists are in
`server_list.py`, tags in `server_tags.py`.

Another project's server is 404 to a member, as in Nova (its lookup is by project).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.handlers import server_list, server_networks, server_tags
from etcd_compute.api.objects.builds import Build
from etcd_compute.api.objects.flavors import Flavor
from etcd_compute.api.objects.images import Image, ImageNotFound
from etcd_compute.api.objects.quotas import OverQuota
from etcd_compute.api.objects.server_groups import ServerGroup
from etcd_compute.api.objects.servers import Server, ServerChanged
from etcd_compute.api.schemas import servers as schema
from etcd_compute.api.schemas.parameter_types import is_true
from etcd_compute.api.views import servers as view
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)
from etcd_compute.errors import UsageError
from etcd_compute.scheduler.spec import api_caller


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/servers", lambda req: server_list.index(api, req, detail=False))
    router.add("GET", "/servers/detail", lambda req: server_list.index(api, req, detail=True))
    router.add("POST", "/servers", lambda req: create(api, req))
    router.add("GET", "/servers/{server_id}", lambda req, server_id: show(api, req, server_id))
    router.add("PUT", "/servers/{server_id}",
               lambda req, server_id: update(api, req, server_id))
    router.add("DELETE", "/servers/{server_id}",
               lambda req, server_id: delete(api, req, server_id))
    server_tags.routes(router, api)


def lookup(api: Backend, req: ApiRequest, server_id: str) -> Server:
    """The server, if the caller may see it: another project's is 404 to a member."""
    server = api.servers.get(server_id)
    if server is None or (server.project_id != req.context.project_id and
                          not req.context.is_admin):
        raise not_found(f"Instance {server_id[:100]} could not be found.")
    return server


def check_lock(req: ApiRequest, server: Server) -> None:
    """Nova's `check_instance_lock`: a locked server refuses a non-admin's actions and
    delete (409)."""
    if server.doc.get("lock") and not req.context.is_admin:
        raise Fault(409, f"Instance {server.uuid} is locked")


def render(api: Backend, req: ApiRequest, server: Server) -> dict[str, Any]:
    shown = server_list.render_detail(api, req, [server])[0]
    if req.version.at_least("2.71"):
        group = (server.record or {}).get("group")
        shown["server_groups"] = [group] if group and api.server_groups.get(group) else []
    return shown


def show(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SERVERS % "show",
                         {"project_id": server.project_id})
    return json_response({"server": render(api, req, server)})


def update(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.update_schema(req.version), body)
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SERVERS % "update",
                         {"project_id": server.project_id})
    asked = body["server"]
    changes: dict[str, Any] = {}
    for field, key in (("name", "name"), ("description", "description"),
                       ("accessIPv4", "access_ipv4"), ("accessIPv6", "access_ipv6")):
        if field in asked:
            changes[key] = asked[field]
    for _ in range(5):
        try:
            server = api.servers.save(server, changes)
            break
        except ServerChanged:
            server = lookup(api, req, server_id)
    else:
        raise Fault(409, f"Instance {server_id} kept changing; try again.")
    shown = render(api, req, server)
    if not req.version.at_least("2.75"):
        shown = before_275(shown)
    return json_response({"server": shown})


def before_275(shown: dict[str, Any], keep_key_name: bool = False) -> dict[str, Any]:
    """What an update or a rebuild answered before 2.75: less than a show (Nova's); a
    rebuild names its key from 2.54; server_groups stay (2.71)."""
    for key in ("OS-EXT-AZ:availability_zone", "config_drive", "key_name",
                "OS-SRV-USG:launched_at", "OS-SRV-USG:terminated_at",
                "OS-EXT-STS:task_state", "OS-EXT-STS:vm_state", "OS-EXT-STS:power_state",
                "os-extended-volumes:volumes_attached", "host_status", "security_groups"):
        if not (key == "key_name" and keep_key_name):
            shown.pop(key, None)
    # The addresses stay, without their extended attributes (Nova's extend_address=False).
    shown["addresses"] = {label: [{"version": a["version"], "addr": a["addr"]} for a in found]
                          for label, found in shown.get("addresses", {}).items()}
    return {k: v for k, v in shown.items() if not k.startswith("OS-EXT-SRV-ATTR:")}


def delete(api: Backend, req: ApiRequest, server_id: str) -> webob.Response:
    server = lookup(api, req, server_id)
    api.policy.authorize(req.context, policy.SERVERS % "delete",
                         {"project_id": server.project_id})
    check_lock(req, server)
    if server.record is None:  # a create that failed before its claim: only its view
        api.servers.remove_failed(server)
        return empty_response(204)
    from etcd_compute.ops import operations

    by = api_caller(req.context.user_id, req.context.project_id)
    if operations.destroy(api.store, api.placement, server.uuid, by=by) in ("requested",
                                                                        "already"):
        try:  # shown as deleting until the host takes it up (its record says so then)
            api.servers.save(server, {"deleting": True})
        except ServerChanged:
            pass  # changed meanwhile (renamed, or the host already moved it on)
    return empty_response(204)


# --- create --------------------------------------------------------------------------------


def _flavor(api: Backend, req: ApiRequest, ref: Any) -> Flavor:
    flavor_id = str(ref).rstrip("/").rsplit("/", 1)[-1]
    flavor = api.flavors.get(flavor_id)
    if flavor is None or not flavor.usable_by(req.context.project_id, req.context.is_admin):
        raise bad_request(f"Flavor {flavor_id[:100]} could not be found.")
    if flavor.disk == 0:
        api.policy.authorize(req.context, policy.SERVERS % "create:zero_disk_flavor")
    return flavor


def image_of(api: Backend, ref: str | None, project_id: str, resources: dict[str, int],
             not_found: str = "Can not find requested image") -> Image:
    """The image `ref` names for a server of `project_id` claiming `resources`: a Glance
    image id the project sees, or a URL under `api.image_url_prefixes` (`objects/images`);
    400 `not_found` for anything else, 400 with the reason for one it cannot boot."""
    if not ref:
        raise bad_request("imageRef is required: servers here boot from an image (there "
                          "is no volume service)")
    try:
        return api.images.find(ref, project_id, resources)
    except ImageNotFound:
        raise bad_request(not_found) from None
    except UsageError as exc:
        raise bad_request(str(exc)) from None


def user_data_of(asked: dict[str, Any]) -> tuple[str | None, str | None]:
    """(text, base64 as given) of a request's user_data (None: none)."""
    encoded = asked.get("user_data")
    if encoded is None:
        return None, None
    try:
        text = base64.decodebytes(encoded.encode()).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise bad_request("User data needs to be valid base 64 of UTF-8 text (binary user "
                          "data is not supported here).") from None
    return text, encoded


def _zone(api: Backend, req: ApiRequest, asked: dict[str, Any]) -> tuple[str | None, str]:
    """(availability zone, extra query): a zone is an aggregate (`api.availability_zones`);
    `zone:host` or 2.74's host force a host (admins)."""
    zone, _, host = (asked.get("availability_zone") or "").partition(":")
    host = host.partition(":")[0] or asked.get("host") or asked.get("hypervisor_hostname")
    query = ""
    if zone and zone != api.settings["default_availability_zone"]:
        zones = api.computes.zone_aggregates()
        if zone not in zones:
            raise bad_request("The requested availability zone is not available")
        query += "&member_of=in:" + ",".join(zones[zone])
    if host:
        rule = (policy.SERVERS % "create:forced_host" if asked.get("availability_zone")
                else "compute:servers:create:requested_destination")
        api.policy.authorize(req.context, rule)
        providers = api.placement.list_providers(name=host)
        if not providers:
            raise bad_request(f"Compute host {host[:255]} could not be found.")
        query += f"&in_tree={providers[0]['uuid']}"
    return zone or None, query


def _group_hint(api: Backend, req: ApiRequest, hints: dict[str, Any]) -> ServerGroup | None:
    """The server group a create joins (the `group` hint): one the caller's project owns
    (an admin's: any). The other hints (checked by the schema) are those of scheduler
    filters Nova leaves off by default (SameHostFilter, DifferentHostFilter, JsonFilter,
    ...): as Nova's scheduler without them, they place nothing."""
    wanted = hints.get("group")
    if wanted is None:
        return None
    if isinstance(wanted, list):
        if len(wanted) != 1:
            raise bad_request("Give one server group in the group hint")
        wanted = wanted[0]
    group = api.server_groups.get(str(wanted))
    if group is None or (group.project_id != req.context.project_id and
                         not req.context.is_admin):
        raise bad_request(f"Instance group {str(wanted)[:100]} could not be found.")
    return group


def _refuse_unsupported(asked: dict[str, Any]) -> None:
    """What Nova takes and we cannot do: refused, never ignored (networks and security
    groups: `server_networks.py`)."""
    if asked.get("personality"):
        raise bad_request("Personality files are not supported (use user_data)")
    if asked.get("block_device_mapping") or not _image_bdm(asked):
        raise bad_request("Block device mappings are not supported: there is no volume "
                          "service")
    if asked.get("trusted_image_certificates"):
        raise bad_request("Image signature certificate validation is not supported")


def _image_bdm(asked: dict[str, Any]) -> bool:
    """Whether a block_device_mapping_v2 is none, or only says what imageRef says: boot
    from the image on the host's local disk (the `openstack` CLI sends that with every
    --image). Anything else needs a volume service."""
    mapping = asked.get("block_device_mapping_v2")
    if not mapping:
        return True
    if len(mapping) != 1:
        return False
    (device,) = mapping
    return (device.get("source_type") == "image" and
            device.get("destination_type", "local") == "local" and
            str(device.get("boot_index", 0)) == "0" and
            device.get("uuid") == asked.get("imageRef", device.get("uuid")) and
            set(device) <= {"uuid", "boot_index", "source_type", "destination_type",
                            "delete_on_termination", "device_name", "disk_bus",
                            "device_type", "tag"})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    context = req.context
    api.policy.authorize(context, policy.SERVERS % "create")
    asked = body["server"]
    group = _group_hint(api, req, body.get("os:scheduler_hints") or
                        body.get("OS-SCH-HNT:scheduler_hints") or {})
    _refuse_unsupported(asked)
    flavor = _flavor(api, req, asked["flavorRef"])
    mapped = (asked.get("block_device_mapping_v2") or [{}])[0].get("uuid")
    image = image_of(api, asked.get("imageRef") or mapped, context.project_id,
                     flavor.resources().get("", {}))
    user_data, user_data_b64 = user_data_of(asked)
    min_count, max_count = int(asked.get("min_count", 1)), int(asked.get("max_count", 1))
    if "max_count" not in asked:
        max_count = min_count
    if min_count > max_count:
        raise bad_request("min_count must be <= max_count")
    network = server_networks.requested(api, req, asked, max_count, min_count)
    max_count = min(max_count, network.servers)  # as many as the free ports allow (Nova)
    metadata = asked.get("metadata") or {}
    limits = api.quotas.limits(context.project_id)  # once per create: two etcd reads
    allowed_items = limits["metadata_items"]
    if 0 <= allowed_items < len(metadata):
        raise Fault(403, f"Quota exceeded for metadata_items: Requested {len(metadata)}, but "
                         f"already used 0 of {allowed_items} metadata_items")
    key = None
    if asked.get("key_name"):
        key = api.keypairs.get(context.user_id, asked["key_name"])
        if key is None:
            raise bad_request("Invalid key_name provided.")
    zone, query = _zone(api, req, asked)
    build = Build(
        project_id=context.project_id, user_id=context.user_id, name=asked["name"],
        flavor=flavor, image=image, min_count=min_count,
        max_count=max_count, description=asked.get("description"), user_data=user_data,
        user_data_b64=user_data_b64, key_name=key.name if key else None,
        public_key=key.public_key if key else None, metadata=metadata,
        availability_zone=zone, extra_query=query, access_ipv4=asked.get("accessIPv4"),
        access_ipv6=asked.get("accessIPv6"), tags=asked.get("tags"), group=group,
        group_members_limit=limits["server_group_members"], limits=limits,
        network=network.network, networks=network.networks,
        security_groups=network.security_groups)
    try:
        docs, reservation = api.builds.create(build)
    except OverQuota as exc:
        raise Fault(403, str(exc)) from None
    except UsageError as exc:
        raise bad_request(str(exc)) from None
    if is_true(asked.get("return_reservation_id", False)):
        return json_response({"reservation_id": reservation}, 202)
    first = docs[0]["uuid"]
    response = json_response({"server": {
        "id": first, "links": view.links(req, "servers", first),
        "OS-DCF:diskConfig": "MANUAL",
        "security_groups": asked.get("security_groups") or [{"name": "default"}]}}, 202)
    response.headers["Location"] = view.links(req, "servers", first)[0]["href"]
    return response
