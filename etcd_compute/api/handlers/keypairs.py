"""/os-keypairs (Nova's keypairs controller): a user's keys; admins name another user
(2.10)."""

from __future__ import annotations

import datetime
from typing import Any

import webob

from etcd_compute.api import paging, policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects import keypairs
from etcd_compute.api.objects.keypairs import (
    InvalidKeypair,
    Keypair,
    KeypairExists,
    TooManyKeypairs,
)
from etcd_compute.api.schemas import keypairs as schema
from etcd_compute.api.wsgi import (
    ApiRequest,
    Fault,
    Router,
    bad_request,
    empty_response,
    json_response,
    not_found,
)


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-keypairs", lambda req: index(api, req))
    router.add("POST", "/os-keypairs", lambda req: create(api, req))
    router.add("GET", "/os-keypairs/{name}", lambda req, name: show(api, req, name))
    router.add("DELETE", "/os-keypairs/{name}", lambda req, name: delete(api, req, name))


def _user(req: ApiRequest, params: dict[str, list[str]], action: str, api: Backend) -> str:
    """The user whose keys are meant (another's only from 2.10, by admins), authorized."""
    user_id = req.context.user_id
    if req.version.at_least("2.10"):
        user_id = (params.get("user_id") or [user_id])[0]
    api.policy.authorize(req.context, policy.KEYPAIRS % action, {"user_id": user_id})
    return user_id


def _fields(keypair: Keypair, req: ApiRequest, names: tuple[str, ...]) -> dict[str, Any]:
    values = {"name": keypair.name, "public_key": keypair.public_key,
              "fingerprint": keypair.fingerprint, "user_id": keypair.user_id,
              "type": keypair.type, "private_key": keypair.private_key,
              "created_at": datetime.datetime.fromtimestamp(
                  keypair.created_at, datetime.UTC).replace(tzinfo=None).isoformat(),
              "deleted": False, "deleted_at": None, "updated_at": None,
              # Nova's database row id; ours is not a row: a number from its creation.
              "id": int(keypair.created_at * 1000) % 2**31}
    if req.version.at_least("2.2"):
        names += ("type",)
    return {name: values[name] for name in names}


def _get(api: Backend, user_id: str, name: str) -> Keypair:
    found = api.keypairs.get(user_id, name)
    if found is None:
        raise not_found(f"Keypair {name[:255]} not found for user {user_id[:255]}")
    return found


def index(api: Backend, req: ApiRequest) -> webob.Response:
    params = req.query()
    validation.query(schema.index_query_schema(req.version), params)
    user_id = _user(req, params, "index", api)
    found = api.keypairs.list(user_id)
    paged = req.version.at_least("2.35")
    if paged:
        limit, marker = paging.limit_and_marker(req, api.settings["max_limit"])
        found = paging.page(found, lambda k: k.name, limit, marker)
    body: dict[str, Any] = {"keypairs": [
        {"keypair": _fields(k, req, ("name", "public_key", "fingerprint"))} for k in found]}
    if paged:
        links = paging.next_links(req, found, lambda k: k.name, "os-keypairs",
                                  api.settings["max_limit"])
        if links:
            body["keypairs_links"] = links
    return json_response(body)


def show(api: Backend, req: ApiRequest, name: str) -> webob.Response:
    params = req.query()
    validation.query(schema.query_schema(req.version), params)
    keypair = _get(api, _user(req, params, "show", api), name)
    return json_response({"keypair": _fields(keypair, req, (
        "name", "public_key", "fingerprint", "user_id", "created_at", "deleted",
        "deleted_at", "id", "updated_at"))})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create_schema(req.version), body)
    asked = body["keypair"]
    user_id = req.context.user_id
    if req.version.at_least("2.10") and asked.get("user_id"):
        user_id = asked["user_id"]
    api.policy.authorize(req.context, policy.KEYPAIRS % "create", {"user_id": user_id})
    if "/" in user_id:
        raise bad_request("Keypair data is invalid: the user id")
    key_type = asked.get("type", "ssh") if req.version.at_least("2.2") else "ssh"
    try:
        if "public_key" in asked:
            keypair = keypairs.imported(asked["name"], user_id, key_type, asked["public_key"])
        elif key_type == "x509":
            raise InvalidKeypair("Keypair data is invalid: x509 keypairs are imported only")
        else:
            keypair = keypairs.generate(asked["name"], user_id)
        limit = api.quotas.limits(req.context.project_id)["key_pairs"]
        api.keypairs.create(keypair, limit)
    except InvalidKeypair as exc:
        raise bad_request(str(exc)) from None
    except TooManyKeypairs as exc:
        raise Fault(403, str(exc)) from None
    except KeypairExists as exc:
        raise Fault(409, str(exc)) from None
    names: tuple[str, ...] = ("name", "public_key", "fingerprint", "user_id")
    if keypair.private_key is not None:
        names += ("private_key",)
    status = 201 if req.version.at_least("2.2") else 200
    return json_response({"keypair": _fields(keypair, req, names)}, status)


def delete(api: Backend, req: ApiRequest, name: str) -> webob.Response:
    params = req.query()
    validation.query(schema.query_schema(req.version), params)
    user_id = _user(req, params, "delete", api)
    _get(api, user_id, name)
    if not api.keypairs.delete(user_id, name):
        raise not_found(f"Keypair {name[:255]} not found for user {user_id[:255]}")
    return empty_response(204 if req.version.at_least("2.2") else 202)
