"""The WSGI stack of the compute API, as Nova's paste pipeline has it:

    /               the versions document (no token needed)
    /v2.1[/]        this version's document (no token needed; microversion headers)
    /v2.1/...       keystonemiddleware's auth_token (401 without a valid token), then the
                    dispatcher: microversion (400/406), caller and admin rule, route,
                    handler; Nova's error shape for every refusal, one log line each.
    /v2[/], /v2/... Nova's legacy v2.0 endpoint: the same, always at microversion 2.1
                    (the headers asking for another are ignored, and none is answered).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

import webob

from etcd_compute.api import microversion
from etcd_compute.api.backend import Backend
from etcd_compute.api.context import Context, NotProjectScoped, new_request_id
from etcd_compute.api.handlers import (
    aggregates,
    attach_interfaces,
    availability_zones,
    extensions,
    flavors,
    hosts,
    hypervisors,
    images,
    instance_actions,
    instance_usage_audit_log,
    keypairs,
    migrations,
    networks,
    quota_classes,
    quota_sets,
    remote_consoles,
    security_group_proxy,
    security_groups,
    server_actions,
    server_diagnostics,
    server_external_events,
    server_groups,
    server_ips,
    server_metadata,
    server_password,
    servers,
    services,
    simple_tenant_usage,
    versions,
    volume_attachments,
)
from etcd_compute.api.policy import PolicyNotAuthorized
from etcd_compute.api.wsgi import ApiRequest, Fault, Router, fault_response
from etcd_compute.errors import ConfigError, ConflictError, NotFound, ServiceUnavailable, UsageError
from etcd_compute.instances import actions as action_txn

LOG = logging.getLogger(__name__)
# The environ's mark of a request to the legacy v2.0 endpoint (/v2/...).
LEGACY_V2 = "etcd_compute.legacy_v2"
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# keystonemiddleware reads the auth plugin's options from its paste-style config too, but
# warns that it does not know them; they are known to the plugin it loads.
_PLUGIN_OPTIONS = ("auth_url", "username", "password", "project_name", "project_id",
                   "user_domain_name", "user_domain_id", "project_domain_name",
                   "project_domain_id", "user_id", "application_credential_id",
                   "application_credential_secret", "system_scope", "domain_name")


class ComputeApp:
    """/v2.1/...: the dispatcher behind auth_token."""

    def __init__(self, backend: Backend):
        self.backend = backend
        self.router = Router()
        for module in (servers, server_actions, server_diagnostics, server_metadata, server_ips,
                       instance_actions, server_groups, flavors, keypairs, quota_sets,
                       quota_classes, availability_zones, services, hypervisors, hosts,
                       extensions, networks, images, aggregates, simple_tenant_usage,
                       instance_usage_audit_log, migrations, server_external_events,
                       security_groups, attach_interfaces, remote_consoles,
                       security_group_proxy, server_password, volume_attachments):
            module.routes(self.router, backend)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        req = ApiRequest(environ)
        # One id per request (Nova's context.request_id): the caller's context, what it asks
        # (a server's instance actions) and the answer's headers carry it.
        request_id = environ["openstack.request_id"] = new_request_id()
        version = None
        legacy = environ.get(LEGACY_V2, False)
        try:
            version = _version(req, legacy)
            with action_txn.serving(request_id):
                response = self._dispatch(req, environ)
        except Fault as fault:
            response = self._refused(req, fault.status, fault.message, fault.headers)
        except PolicyNotAuthorized as exc:
            response = self._refused(req, 403, str(exc))
        except ServiceUnavailable as exc:
            LOG.warning("%s %s: %s", req.method, req.path_info, exc)
            response = fault_response(503, f"The service is unavailable: {exc}")
        except NotFound as exc:  # gone between our reads (a destroy that raced)
            response = self._refused(req, 404, str(exc))
        except UsageError as exc:
            response = self._refused(req, 400, str(exc))
        except ConflictError as exc:
            response = self._refused(req, 409, str(exc))
        except Exception:  # noqa: BLE001 (any other fault is ours: 500, logged whole)
            LOG.exception("%s %s failed", req.method, req.path_info)
            response = fault_response(500, "Unexpected API Error. Please report this at "
                                           "your operator and attach its log.")
        version = version or getattr(req, "_asked_version", None)
        if version is not None and not legacy:
            for name, value in microversion.response_headers(version):
                response.headers.add(name, value)
        response.headers["X-OpenStack-Request-ID"] = request_id
        response.headers["X-Compute-Request-ID"] = request_id
        return response(environ, start_response)

    def _dispatch(self, req: ApiRequest, environ: dict[str, Any]) -> webob.Response:
        try:
            context = Context.from_environ(environ)
        except NotProjectScoped as exc:
            raise Fault(403, str(exc)) from None
        if context is None:
            raise Fault(401, "The request you have made requires authentication.")
        environ["etcd_compute.context"] = context.with_admin(
            self.backend.policy.is_admin(context))
        path = req.path_info[len("/v2" if environ.get(LEGACY_V2) else "/v2.1"):]
        handler, params = self.router.match(req.method, path)
        project = params.pop("project_id", None)
        if project is not None:
            if project != context.project_id:
                raise Fault(400, f"Malformed request URL: URL's project_id '{project[:64]}' "
                                 f"doesn't match Context's project_id "
                                 f"'{context.project_id}'")
            environ["etcd_compute.url_project_id"] = project
        return handler(req, **params)

    @staticmethod
    def _refused(req: ApiRequest, status: int, message: str,
                 headers: Iterable[tuple[str, str]] = ()) -> webob.Response:
        context = req.environ.get("etcd_compute.context")
        who = f" (project {context.project_id}, user {context.user_id})" if context else ""
        LOG.info("%s %s refused %d%s: %s", req.method, req.path_info[:200], status, who,
                 message[:300])
        return fault_response(status, message, headers)


def _version(req: ApiRequest, legacy: bool = False) -> microversion.Version:
    """The request's microversion in its environ; a Fault (400/406) if we cannot serve it.
    The legacy v2 endpoint is 2.1 whatever is asked (Nova's)."""
    if legacy:
        req.environ["etcd_compute.version"] = microversion.MIN
        return microversion.MIN
    try:
        version = microversion.requested(req.headers)
    except microversion.VersionError as exc:
        # Nova names the version asked for in a 406's headers too.
        req._asked_version = exc.version  # type: ignore[attr-defined]
        raise Fault(exc.status, str(exc)) from None
    req.environ["etcd_compute.version"] = version
    return version


class Root:
    """Routes `/`, `/v2.1` (no token) and `/v2.1/...` (through auth_token)."""

    def __init__(self, api: WsgiApp, public_url: str | None = None):
        self.api = api
        self.public_url = public_url

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]
                 ) -> Iterable[bytes]:
        if self.public_url:
            environ["etcd_compute.public_url"] = self.public_url
        path = environ.get("PATH_INFO", "")
        req = webob.Request(environ)
        if path in ("", "/"):
            return versions.index(req)(environ, start_response)
        if path in ("/v2.1", "/v2.1/"):  # the versions list links the latter, as Nova's
            return _version_document(req)(environ, start_response)
        if path in ("/v2", "/v2/"):
            return versions.show(req, legacy=True)(environ, start_response)
        environ[LEGACY_V2] = path.startswith("/v2/")
        if path.startswith(("/v2.1/", "/v2/")):
            try:
                return self.api(environ, start_response)
            except Exception as exc:  # noqa: BLE001 (auth_token's own failures: Keystone)
                # Our dispatcher answers its own faults; what escapes is the middleware's
                # (Keystone unreachable, its certificate refused): one line, Nova's 503.
                LOG.error("%s %s: validating the token failed: %s", req.method,
                          path[:200], str(exc).splitlines()[0][:300] if str(exc) else
                          exc.__class__.__name__)
                return fault_response(503, "The service is unavailable: the identity "
                                           "service could not be reached")(environ,
                                                                             start_response)
        return fault_response(404, "The resource could not be found.")(environ,
                                                                       start_response)


def _version_document(req: webob.Request) -> webob.Response:
    try:
        version = microversion.requested(req.headers)
    except microversion.VersionError as exc:
        response = fault_response(exc.status, str(exc))
        version = exc.version
    else:
        response = versions.show(req)
    if version is not None:
        for name, value in microversion.response_headers(version):
            response.headers.add(name, value)
    return response


class _QuietPluginOptions(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(f'"{name}" is not known' in message for name in _PLUGIN_OPTIONS)


def authenticated(app: WsgiApp, options: dict[str, Any] | None) -> WsgiApp:
    """`app` behind keystonemiddleware's auth_token, configured by `options`
    (`api.keystone_authtoken`): the service user that validates the callers' tokens."""
    if not options:
        raise ConfigError("api.keystone_authtoken: required (the service user that "
                          "validates tokens: auth_url, username, password, ...)")
    from keystonemiddleware import auth_token

    logging.getLogger("keystonemiddleware._common.config").addFilter(_QuietPluginOptions())
    conf = {key: _paste_value(value) for key, value in options.items() if value is not None}
    conf.setdefault("www_authenticate_uri", conf.get("auth_url", ""))
    conf["delay_auth_decision"] = "false"
    return auth_token.AuthProtocol(app, conf)


def _paste_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def make_app(config: dict[str, Any], backend: Backend | None = None,
             auth: bool = True) -> WsgiApp:
    """The whole stack for `config` (schedule.yaml with its `api` section). `auth=False`
    (tests only) trusts the X-* identity headers as they come: never serve it."""
    if backend is None:
        from etcd_compute.etcd import Store
        from etcd_compute.placement import PlacementClient

        backend = Backend.over(config, Store(config["etcd"]),
                               PlacementClient(config["placement"]))
    api: WsgiApp = ComputeApp(backend)
    if auth:
        api = authenticated(api, config["api"]["keystone_authtoken"])
    return Root(api, config["api"]["public_url"])

