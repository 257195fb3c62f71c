"""Requests and responses of the compute API: routes, JSON bodies, Nova's error shape.

Every error is one JSON object named after its status, as Nova's `Fault` writes it:
`{"badRequest": {"code": 400, "message": "..."}}`. Handlers raise `Fault`; anything
else that escapes is logged and answered 500 `computeFault` without details.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import webob

from etcd_compute.api.context import Context
from etcd_compute.api.microversion import Version

FAULT_NAMES = {400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
               405: "badMethod", 409: "conflictingRequest", 413: "overLimit",
               415: "badMediaType", 429: "overLimit", 501: "notImplemented",
               503: "serviceUnavailable"}
# The largest request body we read (Nova's [oslo_middleware] max_request_body_size).
MAX_BODY_BYTES = 114688
# Methods whose requests carry a body (Nova reads none of the others').
WITH_BODY = ("POST", "PUT")


class Fault(Exception):
    """An error answer: status and one-line message (Nova's fault body)."""

    def __init__(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = list(headers)


def bad_request(message: str) -> Fault:
    return Fault(400, message)


def not_found(message: str) -> Fault:
    return Fault(404, message)


def fault_response(status: int, message: str,
                   headers: Iterable[tuple[str, str]] = ()) -> webob.Response:
    name = FAULT_NAMES.get(status, "computeFault")
    response = json_response({name: {"code": status, "message": message}}, status)
    for header, value in headers:
        response.headers.add(header, value)
    return response


def json_response(body: Any, status: int = 200) -> webob.Response:
    response = webob.Response(status=status, content_type="application/json", charset="UTF-8")
    if body is not None:
        response.text = json.dumps(body)
    return response


def empty_response(status: int) -> webob.Response:
    response = webob.Response(status=status)
    response.headers.pop("Content-Type", None)
    return response


class ApiRequest(webob.Request):
    """A request under /v2.1 with its microversion and its caller."""

    @property
    def version(self) -> Version:
        return self.environ["etcd_compute.version"]

    @property
    def context(self) -> Context:
        return self.environ["etcd_compute.context"]

    def json_body(self) -> Any:
        """The body as JSON: 400 "Malformed request body" for anything else (Nova's)."""
        if self.content_length is not None and self.content_length > MAX_BODY_BYTES:
            raise Fault(413, "Request is too large.")
        raw = self.body_file.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise Fault(413, "Request is too large.")
        if not raw:
            raise bad_request("Malformed request body")
        try:
            return json.loads(raw, parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            raise bad_request("Malformed request body") from None

    def query(self) -> dict[str, list[str]]:
        """The query string as Nova's schemas see it: each name with all its values."""
        found: dict[str, list[str]] = {}
        for name, value in self.GET.items():
            found.setdefault(name, []).append(value)
        return found

    def url_for(self, *parts: str) -> str:
        """An absolute link under this API's base (`api.public_url` or the request's)."""
        base = self.environ.get("etcd_compute.public_url") or self.host_url
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


Handler = Callable[..., webob.Response]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


# A path parameter: one segment, never empty.
_PARAM = re.compile(r"\{(\w+)\}")


class Router:
    """Routes `METHOD /path/{param}` to handlers; also under `/{project_id}` as Nova's
    ProjectMapper does (the id must then be the caller's project)."""

    def __init__(self) -> None:
        self.routes: list[Route] = []

    def add(self, method: str, template: str, handler: Handler) -> None:
        body = _PARAM.sub(lambda m: f"(?P<{m.group(1)}>[^/]+)", re.escape(template)
                          .replace(r"\{", "{").replace(r"\}", "}"))
        pattern = re.compile(r"\A(?:/(?P<project_id>[0-9a-f-]+))?" + body + r"/?\Z")
        self.routes.append(Route(method, pattern, handler))

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """(handler, path parameters); Fault 404 when no route takes the path and method."""
        for route in self.routes:
            if route.method != method:
                continue
            found = route.pattern.match(path)
            if found:
                return route.handler, {k: v for k, v in found.groupdict().items()
                                       if v is not None}
        raise not_found("The resource could not be found.")
