"""The versions documents: `GET /` (every version) and `GET /v2.1` (this one), as Nova's.

Neither needs a token (clients discover the API before they authenticate)."""

from __future__ import annotations

import copy
from typing import Any

import webob

from etcd_compute.api import microversion
from etcd_compute.api.wsgi import json_response

DOCS = "http://docs.openstack.org/"
V21 = {
    "id": "v2.1",
    "status": "CURRENT",
    "version": str(microversion.MAX),
    "min_version": str(microversion.MIN),
    "updated": "2013-07-23T11:33:21Z",
    "links": [{"rel": "describedby", "type": "text/html", "href": DOCS}],
    "media-types": [{"base": "application/json",
                     "type": "application/vnd.openstack.compute+json;version=2.1"}],
}


def _base(req: webob.Request) -> str:
    return (req.environ.get("etcd_compute.public_url") or req.host_url).rstrip("/")


def index(req: webob.Request) -> webob.Response:
    """GET /: every version this endpoint serves (v2.1 only: there is no legacy v2.0)."""
    version = {key: V21[key] for key in ("id", "status", "version", "min_version", "updated")}
    version["links"] = [{"rel": "self", "href": f"{_base(req)}/v2.1/"}]
    return json_response({"versions": [version]})


def show(req: webob.Request) -> webob.Response:
    """GET /v2.1: this version, its microversion range, its media type."""
    version: dict[str, Any] = copy.deepcopy(V21)
    version["links"].insert(0, {"rel": "self", "href": f"{_base(req)}/v2.1/"})
    return json_response({"version": version})
