"""/os-aggregates (Nova's aggregates controller, admins only): host aggregates with
metadata; `availability_zone` (also a metadata key) makes their hosts that zone's. A
host added or removed joins or leaves the aggregate's uuid in Placement too, as Nova
mirrors it, so the scheduler's member_of (and a create in the zone) follows.

As Nova: ids are integers (another id is 400, an unknown one 404), names are unique
(409), a host is a compute service's host name (404 otherwise), a host already there is
409, one not there 404, a non-empty aggregate cannot be deleted (400), and a host cannot
be in two zones (400). Image pre-caching (2.81) is not served (404): our hosts keep no
image cache.
"""

from __future__ import annotations

from typing import Any

import webob

from etcd_compute.api import policy, validation
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.aggregates import (
    AZ_KEY,
    MAX_METADATA,
    Aggregate,
    AggregateChanged,
    AggregateExists,
)
from etcd_compute.api.schemas import aggregates as schema
from etcd_compute.api.views import aggregates as view
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
    router.add("GET", "/os-aggregates", lambda req: index(api, req))
    router.add("POST", "/os-aggregates", lambda req: create(api, req))
    router.add("GET", "/os-aggregates/{aggregate_id}",
               lambda req, aggregate_id: show(api, req, aggregate_id))
    router.add("PUT", "/os-aggregates/{aggregate_id}",
               lambda req, aggregate_id: update(api, req, aggregate_id))
    router.add("DELETE", "/os-aggregates/{aggregate_id}",
               lambda req, aggregate_id: delete(api, req, aggregate_id))
    router.add("POST", "/os-aggregates/{aggregate_id}/action",
               lambda req, aggregate_id: action(api, req, aggregate_id))


def _authorize(api: Backend, req: ApiRequest, name: str) -> None:
    api.policy.authorize(req.context, policy.AGGREGATES % name, {})


def _find(api: Backend, aggregate_id: str) -> Aggregate:
    try:
        number = int(aggregate_id)
    except ValueError:
        raise bad_request("Invalid input received: id must be an integer.") from None
    found = api.aggregates.get(number) if 1 <= number <= 2**31 - 1 else None
    if found is None:
        raise not_found(f"Aggregate {aggregate_id[:20]} could not be found.")
    return found


def _answer(req: ApiRequest, aggregate: Aggregate) -> webob.Response:
    return json_response({"aggregate": view.aggregate(req, aggregate)})


def index(api: Backend, req: ApiRequest) -> webob.Response:
    _authorize(api, req, "index")
    return json_response({"aggregates": [view.aggregate(req, a)
                                         for a in api.aggregates.list()]})


def create(api: Backend, req: ApiRequest) -> webob.Response:
    body = req.json_body()
    validation.body(schema.create, body)
    _authorize(api, req, "create")
    asked = body["aggregate"]
    try:
        made = api.aggregates.create(asked["name"], asked.get("availability_zone"))
    except AggregateExists as exc:
        raise Fault(409, str(exc)) from None
    return json_response({"aggregate": view.aggregate(req, made, created=True)})


def show(api: Backend, req: ApiRequest, aggregate_id: str) -> webob.Response:
    _authorize(api, req, "show")
    return _answer(req, _find(api, aggregate_id))


def _zone_conflicts(api: Backend, aggregate: Aggregate, hosts: list[str],
                    zone: str | None) -> list[str]:
    """The other zones `hosts` are in that `zone` would contradict (a host is in one zone)."""
    if not zone:
        return []
    found = {other.availability_zone for other in api.aggregates.list()
             if other.id != aggregate.id and other.availability_zone
             and set(other.hosts) & set(hosts)}
    return sorted(z for z in found if z != zone)


def _set_zone(api: Backend, aggregate: Aggregate, zone: str | None, refusal: str) -> None:
    conflicts = _zone_conflicts(api, aggregate, aggregate.hosts, zone)
    if conflicts:
        raise bad_request(f"{refusal} {aggregate.id}. Reason: One or more hosts already in "
                          f"availability zone(s) {conflicts}.")
    aggregate.availability_zone = zone
    if zone:
        aggregate.metadata[AZ_KEY] = zone
    else:
        aggregate.metadata.pop(AZ_KEY, None)


def update(api: Backend, req: ApiRequest, aggregate_id: str) -> webob.Response:
    body = req.json_body()
    validation.body(schema.update, body)
    _authorize(api, req, "update")
    aggregate = _find(api, aggregate_id)
    asked = body["aggregate"]
    old_name = aggregate.name
    aggregate.name = asked.get("name", aggregate.name)
    if "availability_zone" in asked:
        _set_zone(api, aggregate, asked["availability_zone"], "Cannot update aggregate")
    return _answer(req, _saved(api, aggregate, old_name))


def _saved(api: Backend, aggregate: Aggregate, old_name: str | None = None) -> Aggregate:
    try:
        return api.aggregates.save(aggregate, old_name)
    except AggregateExists as exc:
        raise Fault(409, str(exc)) from None
    except AggregateChanged:
        raise Fault(409, f"Aggregate {aggregate.id} was changed by another request; "
                         "try again.") from None


def delete(api: Backend, req: ApiRequest, aggregate_id: str) -> webob.Response:
    _authorize(api, req, "delete")
    aggregate = _find(api, aggregate_id)
    if aggregate.hosts:
        raise bad_request(f"Cannot remove aggregate {aggregate.id}. Reason: Host aggregate "
                          "is not empty.")
    if not api.aggregates.delete(aggregate):
        raise Fault(409, f"Aggregate {aggregate.id} was changed by another request; "
                         "try again.")
    return empty_response(200)


def action(api: Backend, req: ApiRequest, aggregate_id: str) -> webob.Response:
    body = req.json_body()
    if not isinstance(body, dict) or len(body) != 1:
        raise bad_request("Malformed request body")
    name = next(iter(body))
    if name not in ACTIONS:
        raise bad_request(f"There is no such action: {name[:100]}")
    validation.body(getattr(schema, name), body)
    _authorize(api, req, name)
    aggregate = _find(api, aggregate_id)
    return _answer(req, ACTIONS[name](api, aggregate, body[name]))


def _provider(api: Backend, host: str) -> str | None:
    """The provider of the compute host named `host` (None: no such host)."""
    found = api.placement.list_providers(name=host)
    return found[0]["uuid"] if found else None


def add_host(api: Backend, aggregate: Aggregate, asked: dict[str, Any]) -> Aggregate:
    host = asked["host"]
    provider = _provider(api, host)
    if provider is None:
        raise not_found(f"Compute host {host} could not be found.")
    if host in aggregate.hosts:
        raise Fault(409, f"Aggregate {aggregate.id} already has host {host}.")
    conflicts = _zone_conflicts(api, aggregate, [host], aggregate.availability_zone)
    if conflicts:
        raise bad_request(f"Cannot add host to aggregate {aggregate.id}. Reason: One or "
                          f"more hosts already in availability zone(s) {conflicts}.")
    try:
        return api.aggregates.add_host(aggregate, host, provider)
    except AggregateChanged:
        raise Fault(409, f"Aggregate {aggregate.id} was changed by another request; "
                         "try again.") from None


def remove_host(api: Backend, aggregate: Aggregate, asked: dict[str, Any]) -> Aggregate:
    host = asked["host"]
    provider = _provider(api, host)
    if host not in aggregate.hosts:
        if provider is None:
            raise not_found(f"Compute host {host} could not be found.")
        raise not_found(f"Aggregate {aggregate.id} has no host {host}.")
    try:
        return api.aggregates.remove_host(aggregate, host, provider)
    except AggregateChanged:
        raise Fault(409, f"Aggregate {aggregate.id} was changed by another request; "
                         "try again.") from None


def set_metadata(api: Backend, aggregate: Aggregate, asked: dict[str, Any]) -> Aggregate:
    changes = asked["metadata"]
    if AZ_KEY in changes:
        _set_zone(api, aggregate, changes[AZ_KEY], "Cannot update metadata of aggregate")
    if len({**aggregate.metadata, **changes}) > MAX_METADATA:
        raise bad_request(f"Aggregate {aggregate.id}: at most {MAX_METADATA} metadata items")
    for key, value in changes.items():
        if key == AZ_KEY:
            continue
        if value is None:
            aggregate.metadata.pop(key, None)
        else:
            aggregate.metadata[key] = value
    return _saved(api, aggregate)


ACTIONS = {"add_host": add_host, "remove_host": remove_host, "set_metadata": set_metadata}
