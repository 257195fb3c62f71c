"""/images (Nova's deprecated image proxy, microversions 2.1 to 2.35; 404 from 2.36 as in
Nova): Glance's images as the caller's project sees them, in Nova's shape.

list and detail (Nova's filters: name, status, server, type, changes-since, minRam,
minDisk; limit and marker), show, delete, and the image's metadata (its properties).
The API reads Glance with its service credential, so Glance's own rules are applied
here: a project sees public and community images, its own and those shared with it
(another's private image is 404); only a member of the owner's project (or an admin)
changes or deletes one, as Glance's modify_image and delete_image defaults (a reader, or
another project's member, is 403 as Nova answers Glance's refusal).
"""

from __future__ import annotations

import datetime
from typing import Any

import webob

from etcd_compute.api import paging, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.views.servers import links
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)
from etcd_compute.errors import GlanceError, NotFound
from etcd_compute.glance import GlanceClient, is_image_id

# Glance's image fields: not the image's metadata (its other keys are its properties).
CORE = frozenset({
    "id", "name", "status", "visibility", "protected", "checksum", "owner", "size",
    "virtual_size", "min_ram", "min_disk", "disk_format", "container_format", "created_at",
    "updated_at", "tags", "file", "schema", "self", "os_hash_algo", "os_hash_value",
    "os_hidden", "direct_url", "locations", "stores"})
# Nova's image status and progress for Glance's status.
STATUS = {"active": "ACTIVE", "queued": "SAVING", "saving": "SAVING", "importing": "SAVING",
          "uploading": "SAVING", "deleted": "DELETED", "pending_delete": "DELETED",
          "killed": "ERROR", "deactivated": "ERROR"}
PROGRESS = {"queued": 25, "saving": 50, "importing": 50, "uploading": 50, "active": 100}


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/images", lambda req: index(api, req, detail=False))
    router.add("GET", "/images/detail", lambda req: index(api, req, detail=True))
    router.add("GET", "/images/{image_id}", lambda req, image_id: show(api, req, image_id))
    router.add("DELETE", "/images/{image_id}",
               lambda req, image_id: delete(api, req, image_id))
    router.add("GET", "/images/{image_id}/metadata",
               lambda req, image_id: metadata(api, req, image_id))
    router.add("POST", "/images/{image_id}/metadata",
               lambda req, image_id: set_metadata(api, req, image_id, replace=False))
    router.add("PUT", "/images/{image_id}/metadata",
               lambda req, image_id: set_metadata(api, req, image_id, replace=True))
    router.add("GET", "/images/{image_id}/metadata/{key}",
               lambda req, image_id, key: metadata_item(api, req, image_id, key))
    router.add("PUT", "/images/{image_id}/metadata/{key}",
               lambda req, image_id, key: set_metadata_item(api, req, image_id, key))
    router.add("DELETE", "/images/{image_id}/metadata/{key}",
               lambda req, image_id, key: delete_metadata_item(api, req, image_id, key))


# --- reading -------------------------------------------------------------------------------


def _glance(api: Backend, req: ApiRequest) -> GlanceClient:
    if req.version.at_least("2.36"):  # Nova removed the image proxy in 2.36
        raise not_found("The resource could not be found.")
    if api.images.glance is None:
        raise not_found("The resource could not be found.")
    return api.images.glance


def _find(api: Backend, req: ApiRequest, image_id: str) -> dict[str, Any]:
    glance = _glance(api, req)
    try:
        image = glance.get(image_id) if is_image_id(image_id) else None
    except NotFound:
        image = None
    if image is None or not _shown(glance, req, image):
        raise not_found("Image not found.")
    return image


def _shown(glance: GlanceClient, req: ApiRequest, image: dict[str, Any]) -> bool:
    """Whether the caller sees `image` (listed or shown): an admin sees every image."""
    return req.context.is_admin or glance.can_see(image, req.context.project_id)


def _owned(api: Backend, req: ApiRequest, image_id: str, refusal: str | None = None
           ) -> dict[str, Any]:
    """The image, if the caller may change it: 403 (`refusal`, or Nova's ImageNotAuthorized)
    otherwise."""
    image = _find(api, req, image_id)
    # Glance's modify_image/delete_image default is this base rule (admin, or the member
    # role in the image owner's project): a reader of the owner's project may not.
    if not api.policy.allows(req.context, "project_member_or_admin",
                             {"project_id": image.get("owner")}):
        raise Fault(403, refusal or f"Not authorized for image {image['id']}.")
    return image


def properties(image: dict[str, Any]) -> dict[str, str]:
    return {key: value for key, value in image.items()
            if key not in CORE and isinstance(value, str)}


def _time(value: str | None) -> str | None:
    """Glance's timestamp in Nova's form; None for none or one that does not parse."""
    try:
        parsed = datetime.datetime.fromisoformat((value or "").replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _links(api: Backend, req: ApiRequest, image_id: str) -> list[dict[str, str]]:
    return [*links(req, "images", image_id),
            {"rel": "alternate", "type": "application/vnd.openstack.image",
             "href": api.images.url_of(image_id)}]


def view(api: Backend, req: ApiRequest, image: dict[str, Any], detail: bool) -> dict[str, Any]:
    shown: dict[str, Any] = {"id": image["id"], "name": image.get("name"),
                             "links": _links(api, req, image["id"])}
    if not detail:
        return shown
    status = image.get("status", "")
    shown.update({
        "minRam": image.get("min_ram") or 0, "minDisk": image.get("min_disk") or 0,
        "metadata": properties(image), "created": _time(image.get("created_at")),
        "updated": _time(image.get("updated_at")), "status": STATUS.get(status, "UNKNOWN"),
        "progress": PROGRESS.get(status, 0), "OS-EXT-IMG-SIZE:size": image.get("size")})
    server = image.get("instance_uuid")
    if isinstance(server, str):
        shown["server"] = {"id": server, "links": links(req, "servers", server)}
    return shown


def _matches(image: dict[str, Any], params: dict[str, list[str]]) -> bool:
    name = validation.single(params, "name")
    if name is not None and image.get("name") != name:
        return False
    status = validation.single(params, "status")
    if status is not None and STATUS.get(image.get("status", ""), "UNKNOWN") != status.upper():
        return False
    server = validation.single(params, "server")
    if server is not None and image.get("instance_uuid") != server.rstrip("/").rsplit("/")[-1]:
        return False
    kind = validation.single(params, "type")
    if kind is not None and image.get("image_type") != kind:
        return False
    for param, field in (("minRam", "min_ram"), ("minDisk", "min_disk")):
        least = validation.single(params, param)
        if least is not None:
            try:
                if (image.get(field) or 0) < int(least):
                    return False
            except ValueError:
                raise bad_request(f"Invalid {param} filter [{least[:100]}]") from None
    since = validation.single(params, "changes-since")
    if since is not None:
        when = validation.parse_time(since)
        if when is None:
            raise bad_request(f"Invalid changes-since value {since[:100]}")
        updated = validation.parse_time(image.get("updated_at") or "")
        if updated is None or updated < when:
            return False
    return True


def index(api: Backend, req: ApiRequest, detail: bool) -> webob.Response:
    glance = _glance(api, req)
    params = req.query()
    # Glance's order: the newest first.
    found = sorted((image for image in glance.list()
                    if _matches(image, params) and _shown(glance, req, image)),
        key=lambda image: (image.get("created_at") or "", image["id"]), reverse=True)
    limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])

    def key(image: dict[str, Any]) -> str:
        return str(image["id"])

    page = paging.page(found, key, limit, marker)
    body: dict[str, Any] = {"images": [view(api, req, image, detail) for image in page]}
    following = paging.next_links(req, page, key, "images/detail" if detail else "images",
                                  api.settings["max_limit"])
    if following:
        body["images_links"] = following
    return json_response(body)


def show(api: Backend, req: ApiRequest, image_id: str) -> webob.Response:
    return json_response({"image": view(api, req, _find(api, req, image_id), True)})


def delete(api: Backend, req: ApiRequest, image_id: str) -> webob.Response:
    image = _owned(api, req, image_id, "You are not allowed to delete the image.")
    if image.get("protected"):
        raise Fault(409, f"Image {image['id']} is protected and cannot be deleted.")
    try:
        _glance(api, req).delete(image["id"])
    except NotFound:
        raise not_found("Image not found.") from None
    except GlanceError as exc:
        # Nova's: Glance's conflict is ImageDeleteConflict (409), another refusal Invalid.
        raise Fault(409 if exc.status == 409 else 400, str(exc)) from None
    return empty_response(204)


# --- metadata (the image's properties) -------------------------------------------------------


def metadata(api: Backend, req: ApiRequest, image_id: str) -> webob.Response:
    return json_response({"metadata": properties(_find(api, req, image_id))})


def metadata_item(api: Backend, req: ApiRequest, image_id: str, key: str) -> webob.Response:
    found = properties(_find(api, req, image_id))
    if key not in found:
        raise not_found(f"Image {image_id} has no metadata with key {key[:255]}.")
    return json_response({"meta": {key: found[key]}})


def _checked(body: Any, field: str) -> dict[str, str]:
    if not isinstance(body, dict) or not isinstance(body.get(field), dict):
        raise bad_request(f"Malformed request body: '{field}' is required")
    values = body[field]
    for key, value in values.items():
        if not isinstance(key, str) or not 1 <= len(key) <= 255 or key in CORE or \
                not isinstance(value, str) or len(value) > 255:
            raise bad_request(f"Invalid metadata: {str(key)[:64]}")
    return values


def _write(api: Backend, req: ApiRequest, image: dict[str, Any], wanted: dict[str, str]
           ) -> dict[str, str]:
    """Make the image's properties `wanted` (within the metadata_items quota)."""
    allowed = api.quotas.limits(req.context.project_id)["metadata_items"]
    if 0 <= allowed < len(wanted):
        raise Fault(403, "Image metadata limit exceeded")  # Nova's words
    current = properties(image)
    glance = _glance(api, req)
    gone = [key for key in current if key not in wanted]
    if gone:
        glance.remove_properties(image["id"], gone)
    changed = {key: value for key, value in wanted.items() if current.get(key) != value}
    if changed:
        glance.update(image["id"], **changed)
    return properties(glance.get(image["id"]))


def set_metadata(api: Backend, req: ApiRequest, image_id: str, replace: bool
                 ) -> webob.Response:
    asked = _checked(req.json_body(), "metadata")
    image = _owned(api, req, image_id)
    wanted = dict(asked) if replace else {**properties(image), **asked}
    return json_response({"metadata": _write(api, req, image, wanted)})


def set_metadata_item(api: Backend, req: ApiRequest, image_id: str, key: str
                      ) -> webob.Response:
    asked = _checked(req.json_body(), "meta")
    if len(asked) != 1:
        raise bad_request("Request body contains too many items")
    if key not in asked:
        raise bad_request("Request body and URI mismatch")
    image = _owned(api, req, image_id)
    _write(api, req, image, {**properties(image), **asked})
    return json_response({"meta": asked})


def delete_metadata_item(api: Backend, req: ApiRequest, image_id: str, key: str
                         ) -> webob.Response:
    image = _owned(api, req, image_id)
    current = properties(image)
    if key not in current:
        raise not_found(f"Image {image_id} has no metadata with key {key[:255]}.")
    _glance(api, req).remove_properties(image["id"], [key])
    return empty_response(204)
