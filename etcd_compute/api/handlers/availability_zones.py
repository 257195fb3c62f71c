"""/os-availability-zone[/detail] (Nova's availability zone controller): the zones our
compute hosts are in (`api.availability_zones`: names of Placement aggregates the hosts
join, `api.default_availability_zone` for the others). A zone is available while it has
an enabled host; the detail (admins) names its enabled hosts, each `available` when up."""

from __future__ import annotations

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.views import computes as view
from etcd_compute.api.wsgi import ApiRequest, Router, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-availability-zone", lambda req: index(api, req, detail=False))
    router.add("GET", "/os-availability-zone/detail", lambda req: index(api, req, detail=True))


def index(api: Backend, req: ApiRequest, detail: bool) -> webob.Response:
    api.policy.authorize(req.context, policy.AVAILABILITY_ZONE % ("detail" if detail
                                                                  else "list"), {})
    computes = api.computes.list(with_resources=False)
    return json_response({"availabilityZoneInfo": view.zones(computes, detail)})
