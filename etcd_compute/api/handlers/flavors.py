"""/flavors and /flavors/{id}/os-extra_specs (Nova's flavors, flavor_manage and
flavors_extraspecs controllers)."""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.flavors import (
    Flavor,
    FlavorChanged,
    FlavorExists,
    extra_spec_problem,
    new_id,
)
from etcd_compute.api.schemas import flavors as schema
from etcd_compute.api.schemas.parameter_types import is_true
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

# Nova's sort keys and the flavor fields they sort by.
SORT_FIELDS = {"flavorid": "id", "id": "id", "name": "name", "memory_mb": "ram",
               "root_gb": "disk", "vcpus": "vcpus", "ephemeral_gb": "ephemeral",
               "swap": "swap", "rxtx_factor": "rxtx_factor", "is_public": "is_public",
               "created_at": "created_at", "description": "description"}


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/flavors", lambda req: index(api, req, detail=False))
    router.add("GET", "/flavors/detail", lambda req: index(api, req, detail=True))
    router.add("POST", "/flavors", lambda req: create(api, req))
    router.add("GET", "/flavors/{flavor_id}", lambda req, flavor_id: show(api, req, flavor_id))
    router.add("PUT", "/flavors/{flavor_id}", lambda req, flavor_id: update(api, req, flavor_id))
    router.add("DELETE", "/flavors/{flavor_id}",
               lambda req, flavor_id: delete(api, req, flavor_id))
    router.add("GET", "/flavors/{flavor_id}/os-extra_specs",
               lambda req, flavor_id: extra_specs(api, req, flavor_id))
    router.add("POST", "/flavors/{flavor_id}/os-extra_specs",
               lambda req, flavor_id: add_extra_specs(api, req, flavor_id))
    router.add("GET", "/flavors/{flavor_id}/os-extra_specs/{key}",
               lambda req, flavor_id, key: extra_spec(api, req, flavor_id, key))
    router.add("PUT", "/flavors/{flavor_id}/os-extra_specs/{key}",
               lambda req, flavor_id, key: set_extra_spec(api, req, flavor_id, key))
    router.add("DELETE", "/flavors/{flavor_id}/os-extra_specs/{key}",
               lambda req, flavor_id, key: delete_extra_spec(api, req, flavor_id, key))


# --- views --------------------------------------------------------------------------------


def basic(req: ApiRequest, flavor: Flavor) -> dict[str, Any]:
    shown: dict[str, Any] = {"id": flavor.id, "name": flavor.name,
                             "links": links(req, "flavors", flavor.id)}
    if req.version.at_least("2.55"):
        shown["description"] = flavor.description
    return shown


def detailed(req: ApiRequest, flavor: Flavor, with_extra_specs: bool) -> dict[str, Any]:
    shown = {**basic(req, flavor), "ram": flavor.ram, "disk": flavor.disk,
             "swap": flavor.swap or ("" if not req.version.at_least("2.75") else 0),
             "OS-FLV-EXT-DATA:ephemeral": flavor.ephemeral, "OS-FLV-DISABLED:disabled": False,
             "vcpus": flavor.vcpus, "os-flavor-access:is_public": flavor.is_public,
             "rxtx_factor": flavor.rxtx_factor}
    if with_extra_specs:
        shown["extra_specs"] = dict(flavor.extra_specs)
    return shown


def _with_extra_specs(api: Backend, req: ApiRequest) -> bool:
    """From 2.61 a flavor shows its extra specs to whom the index rule allows."""
    return req.version.at_least("2.61") and \
        api.policy.allows(req.context, policy.EXTRA_SPECS % "index")


def _get(api: Backend, flavor_id: str, visible_to: ApiRequest | None = None) -> Flavor:
    flavor = api.flavors.get(flavor_id)
    if flavor is None or (visible_to is not None and not flavor.is_public and
                          not visible_to.context.is_admin):
        raise not_found(f"Flavor {flavor_id} could not be found.")
    return flavor


# --- flavors --------------------------------------------------------------------------------


def index(api: Backend, req: ApiRequest, detail: bool) -> webob.Response:
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    flavors = api.flavors.list()
    is_public: bool | None = True
    if req.context.is_admin:
        raw = validation.single(params, "is_public")
        if raw is not None:
            if raw.strip().lower() == "none":
                is_public = None
            elif raw.strip().lower() in ("true", "false", "1", "0", "t", "f", "yes", "no",
                                         "y", "n", "on", "off"):
                is_public = is_true(raw)
            else:
                raise bad_request(f"Invalid is_public filter [{raw[:100]}]")
    if is_public is not None:
        flavors = [f for f in flavors if f.is_public == is_public]
    for name, attr in (("minRam", "ram"), ("minDisk", "disk")):
        raw = validation.single(params, name)
        if raw is not None:
            try:
                least = int(raw)
            except ValueError:
                raise bad_request(f"Invalid {name} filter [{raw[:100]}]") from None
            flavors = [f for f in flavors if getattr(f, attr) >= least]
    sort_key = validation.single(params, "sort_key") or "flavorid"
    sort_dir = validation.single(params, "sort_dir") or "asc"
    field = SORT_FIELDS.get(sort_key, "id")

    def sort_value(flavor: Flavor) -> tuple[bool, Any, str]:
        value = getattr(flavor, field)
        return value is None, value if value is not None else 0, flavor.id

    flavors.sort(key=sort_value, reverse=sort_dir == "desc")
    limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
    shown = paging.page(flavors, lambda f: f.id, limit, marker)
    with_specs = detail and _with_extra_specs(api, req)
    body: dict[str, Any] = {"flavors": [detailed(req, f, with_specs) if detail
                                        else basic(req, f) for f in shown]}
    next_link = paging.next_links(req, shown, lambda f: f.id,
                                  "flavors/detail" if detail else "flavors",
                                  api.settings["max_limit"])
    if next_link:
        body["flavors_links"] = next_link
    return json_response(body)


def show(api: Backend, req: ApiRequest, flavor_id: str) -> webob.Response:
    flavor = _get(api, flavor_id, req)
    return json_response({"flavor": detailed(req, flavor, _with_extra_specs(api, req))})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    api.policy.authorize(req.context, policy.FLAVOR_MANAGE % "create", {})
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    asked = body["flavor"]
    flavor_id = asked.get("id")
    if flavor_id is None or str(flavor_id) == "auto":
        flavor_id = new_id()
    flavor = Flavor(
        id=str(flavor_id), name=asked["name"], vcpus=int(asked["vcpus"]),
        ram=int(asked["ram"]), disk=int(asked["disk"]),
        ephemeral=int(asked.get("OS-FLV-EXT-DATA:ephemeral", 0)),
        swap=int(asked.get("swap", 0)), rxtx_factor=float(asked.get("rxtx_factor", 1.0)),
        is_public=is_true(asked.get("os-flavor-access:is_public", True)),
        description=asked.get("description") if req.version.at_least("2.55") else None)
    try:
        api.flavors.create(flavor)
    except FlavorExists as exc:
        raise Fault(409, str(exc)) from None
    return json_response({"flavor": detailed(req, flavor, _with_extra_specs(api, req))})


def update(api: Backend, req: ApiRequest, flavor_id: str) -> webob.Response:
    if not req.version.at_least("2.55"):
        raise not_found("The resource could not be found.")
    api.policy.authorize(req.context, policy.FLAVOR_MANAGE % "update", {})
    body = req.json_body()
    validation.body(schema.update, body)
    flavor = _changed(api, flavor_id, lambda f: setattr(f, "description",
                                                       body["flavor"]["description"]))
    return json_response({"flavor": detailed(req, flavor, _with_extra_specs(api, req))})


def delete(api: Backend, req: ApiRequest, flavor_id: str) -> webob.Response:
    api.policy.authorize(req.context, policy.FLAVOR_MANAGE % "delete", {})
    flavor = _get(api, flavor_id)
    if not api.flavors.delete(flavor):
        raise not_found(f"Flavor {flavor_id} could not be found.")
    return empty_response(202)


def _changed(api: Backend, flavor_id: str, change: Any) -> Flavor:
    """Apply `change` to the flavor and save it, again if another write came between."""
    for _ in range(5):
        flavor = _get(api, flavor_id)
        change(flavor)
        try:
            return api.flavors.save(flavor)
        except FlavorChanged:
            continue
    raise Fault(409, f"Flavor {flavor_id} kept changing; try again.")


# --- extra specs ----------------------------------------------------------------------------


def extra_specs(api: Backend, req: ApiRequest, flavor_id: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTRA_SPECS % "index")
    return json_response({"extra_specs": dict(_get(api, flavor_id, req).extra_specs)})


def extra_spec(api: Backend, req: ApiRequest, flavor_id: str, key: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTRA_SPECS % "show")
    flavor = _get(api, flavor_id, req)
    if key not in flavor.extra_specs:
        raise not_found(f"Flavor {flavor_id} has no extra specs with key {key[:255]}.")
    return json_response({key: flavor.extra_specs[key]})


def _checked(specs: dict[str, Any]) -> dict[str, str]:
    found = {key: str(value) if not isinstance(value, bool) else str(value)
             for key, value in specs.items()}
    for key, value in found.items():
        problem = extra_spec_problem(key, value)
        if problem:
            raise bad_request(problem)
    return found


def add_extra_specs(api: Backend, req: ApiRequest, flavor_id: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTRA_SPECS % "create", {})
    body = req.json_body()
    validation.body(schema.extra_specs_create, body)
    specs = _checked(body["extra_specs"])
    flavor = _changed(api, flavor_id, lambda f: f.extra_specs.update(specs))
    return json_response({"extra_specs": dict(flavor.extra_specs)})


def set_extra_spec(api: Backend, req: ApiRequest, flavor_id: str,
                   key: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTRA_SPECS % "update", {})
    body = req.json_body()
    validation.body(schema.extra_spec_update, body)
    if key not in body:
        raise bad_request("Request body and URI mismatch")
    specs = _checked(body)
    _changed(api, flavor_id, lambda f: f.extra_specs.update(specs))
    return json_response(specs)


def delete_extra_spec(api: Backend, req: ApiRequest, flavor_id: str,
                      key: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTRA_SPECS % "delete", {})
    if key not in _get(api, flavor_id).extra_specs:
        raise not_found(f"Flavor {flavor_id} has no extra specs with key {key[:255]}.")
    _changed(api, flavor_id, lambda f: f.extra_specs.pop(key, None))
    return empty_response(200)
