"""The versions documents: `GET /` (every version), `GET /v2.1` and `GET /v2` (each one),
as Nova's.

None needs a token (clients discover the API before they authenticate). v2.0 is Nova's
legacy endpoint, `/v2/...`: the same API at microversion 2.1, whatever a request asks
(app.py), as Nova serves it; Nova lists it first, and clients and Tempest expect it."""

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

V20 = {
    "id": "v2.0",
    "status": "SUPPORTED",
    "version": "",
    "min_version": "",
    "updated": "2011-01-21T11:33:21Z",
    "links": [{"rel": "describedby", "type": "text/html", "href": DOCS}],
    "media-types": [{"base": "application/json",
                     "type": "application/vnd.openstack.compute+json;version=2"}],
}
PATHS = {"v2.0": "v2", "v2.1": "v2.1"}


def _base(req: webob.Request) -> str:
    return (req.environ.get("etcd_compute.public_url") or req.host_url).rstrip("/")


def index(req: webob.Request) -> webob.Response:
    """GET /: every version this endpoint serves (the legacy v2.0, then v2.1)."""
    listed = []
    for document in (V20, V21):
        version = {key: document[key]
                   for key in ("id", "status", "version", "min_version", "updated")}
        version["links"] = [{"rel": "self",
                             "href": f"{_base(req)}/{PATHS[document['id']]}/"}]
        listed.append(version)
    return json_response({"versions": listed})


def show(req: webob.Request, legacy: bool = False) -> webob.Response:
    """GET /v2.1 (its microversion range, its media type), or GET /v2 (the legacy one)."""
    version: dict[str, Any] = copy.deepcopy(V20 if legacy else V21)
    version["links"].insert(0, {"rel": "self",
                                "href": f"{_base(req)}/{PATHS[version['id']]}/"})
    return json_response({"version": version})
