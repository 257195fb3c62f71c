"""A small client for OpenStack Neutron's API v2.0, as a service user of Keystone.

Reads like the task: `neutron.network(network_id)`, `neutron.ports(device_id=server)`,
`neutron.create_port({...})`, `neutron.update_port(port_id, {...})`,
`neutron.delete_port(port_id)`. The credential is `network.neutron.keystone` (the
`etcd-compute` service user; Neutron's policy lets the `service` role create ports for
any project and set their binding, as Nova's service user does); the endpoint is
`network.neutron.endpoint`, or the catalog's `network` service.

Errors come back as one line: NeutronUnavailable (a ServiceUnavailable) when Neutron or
Keystone cannot be reached or refuse us, NotFound for a 404, NeutronError (with Neutron's
status and error type) for anything else it refused.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

from etcd_compute import keystone, metrics
from etcd_compute.errors import ConfigError, NeutronError, NeutronUnavailable, NotFound

# Filters in one list request go into its query string: ask for this many ids at a time.
IDS_PER_QUERY = 50
# A read Neutron does not answer (refused, or not in time on a loaded machine) is tried again
# this many times, backing off from 0.5 s, before it fails: Nova's [neutron] http_retries (3).
# Reads only: keystoneauth takes a read timeout for a connect timeout and would send a POST
# again that Neutron may have done already (a second port for one server).
CONNECT_RETRIES = 3
RETRIED = frozenset({"GET", "HEAD"})


def _one_line(text: str) -> str:
    lines = [line.strip() for line in re.sub(r"<[^>]+>", " ", text).splitlines()
             if line.strip()]
    return " ".join(lines)[:300]


def _neutron_error(response: Any) -> tuple[str, str]:
    """(error type, message) of Neutron's error body, or ("", the body in one line)."""
    try:
        body = response.json()
    except ValueError:
        return "", _one_line(response.text)
    error = body.get("NeutronError") if isinstance(body, dict) else None
    if isinstance(error, dict):
        return str(error.get("type") or ""), _one_line(str(error.get("message") or ""))
    return "", _one_line(response.text)


def matching_groups(groups: list[dict[str, Any]], wanted: str) -> list[str]:
    """The ids of `groups` that `wanted` names, as Nova reads a security group asked for:
    the one of that id, else every one of that name (several: the name is ambiguous)."""
    by_id = [group["id"] for group in groups if group["id"] == wanted]
    return by_id or [group["id"] for group in groups if group.get("name") == wanted]


def floating_addresses(neutron: Any, port_ids: list[str]) -> dict[str, list[str]]:
    """The floating IP addresses on each of `port_ids` (a port id -> its addresses; ports
    without one left out), asked IDS_PER_QUERY ports at a time: the compute API's server
    addresses and the metadata server's public-ipv4. `neutron`: a NeutronClient, or
    anything with its `floating_ips` (the API's Neutron as its caller sees it)."""
    floating: dict[str, list[str]] = {}
    for start in range(0, len(port_ids), IDS_PER_QUERY):
        for found in neutron.floating_ips(port_id=port_ids[start:start + IDS_PER_QUERY]):
            floating.setdefault(found["port_id"], []).append(found["floating_ip_address"])
    return floating


class NeutronClient:
    def __init__(self, neutron_config: dict[str, Any]):
        if not neutron_config.get("keystone"):
            raise ConfigError("network.neutron.keystone is not set: the neutron backend needs "
                              "a service credential (see docs/explanation/networking.md)")
        ca = neutron_config.get("ca_cert")
        if ca and not Path(ca).is_file():
            raise ConfigError(f"network.neutron.ca_cert {ca}: no such file")
        self.verify: str | bool = ca or True
        self.timeout = neutron_config.get("timeout", 30.0)
        self.session = keystone.session(neutron_config["keystone"], self.verify, self.timeout)
        self._endpoint = (neutron_config.get("endpoint") or "").rstrip("/") or None

    # --- transport -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Neutron's URL: configured, or the catalog's `network` service (public)."""
        if self._endpoint is None:
            from keystoneauth1 import exceptions as ks_exceptions

            try:
                found = self.session.get_endpoint(service_type="network", interface="public")
            except ks_exceptions.ClientException as exc:
                raise self._unavailable(f"Keystone: {_one_line(str(exc))}") from None
            if not found:
                raise NeutronUnavailable("no network service in Keystone's catalog; set "
                                         "network.neutron.endpoint")
            self._endpoint = found.rstrip("/")
        return self._endpoint

    def connect(self) -> None:
        """A token and a connection made now, with a look at the extension moves need
        (`binding-extended`), so that a call that must be quick later (a live move's
        activation) pays for neither."""
        self.request("GET", "/extensions/binding-extended")

    def _unavailable(self, why: str) -> NeutronUnavailable:
        metrics.backend_error("neutron")
        return NeutronUnavailable(f"Neutron: {why}")

    def request(self, method: str, path: str, expect: tuple[int, ...] = (200,),
                **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exceptions

        url = f"{self.endpoint}/v2.0{path}"
        try:
            response = self.session.request(url, method, raise_exc=False,
                                            connect_retries=CONNECT_RETRIES
                                            if method in RETRIED else 0, **kwargs)
        except ks_exceptions.Unauthorized:
            raise self._unavailable("Keystone refused our credentials "
                                    "(network.neutron.keystone)") from None
        except ks_exceptions.SSLError as exc:
            raise self._unavailable(f"TLS handshake failed at {url} ({_one_line(str(exc))}); "
                                    "check network.neutron.ca_cert") from None
        except ks_exceptions.ClientException as exc:
            raise self._unavailable(f"{self.endpoint} is unreachable "
                                    f"({exc.__class__.__name__}); check that it runs and "
                                    "network.neutron.endpoint") from None
        if response.status_code in expect:
            return response
        kind, detail = _neutron_error(response)
        where = path.split("?")[0]
        if response.status_code == 404:
            raise NotFound(f"Neutron {method} {where}: {detail or '404 not found'}")
        if response.status_code == 401 or response.status_code >= 500:
            raise self._unavailable(f"{method} {where}: {response.status_code} {detail}")
        raise NeutronError(f"Neutron {method} {where}: {response.status_code} {detail}",
                           response.status_code, kind)

    def _list(self, collection: str, filters: dict[str, Any]) -> list[dict[str, Any]]:
        """Every item of `collection` matching `filters` (a list value: any of them)."""
        return self.request("GET", f"/{collection}", params=filters).json()[collection]

    def _one(self, collection: str, item_id: str) -> dict[str, Any]:
        _check_id(collection[:-1], item_id)
        singular = collection[:-1]
        return self.request("GET", f"/{collection}/{item_id}").json()[singular]

    # --- networks, subnets, security groups -----------------------------------

    def network(self, network_id: str) -> dict[str, Any]:
        return self._one("networks", network_id)

    def networks(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("networks", filters)

    def subnets(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("subnets", filters)

    def security_groups(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("security_groups", filters)

    def floating_ips(self, **filters: Any) -> list[dict[str, Any]]:
        return self._list("floatingips", filters)

    def security_group(self, group_id: str) -> dict[str, Any]:
        return self._one("security_groups", group_id)

    def security_group_rule(self, rule_id: str) -> dict[str, Any]:
        return self._one("security_group_rules", rule_id)

    def create(self, collection: str, item: dict[str, Any]) -> dict[str, Any]:
        """A new item of `collection` (`security_groups`, `security_group_rules`)."""
        singular = collection[:-1]
        return self.request("POST", f"/{collection}", expect=(201,),
                            json={singular: item}).json()[singular]

    def update(self, collection: str, item_id: str, changes: dict[str, Any]
               ) -> dict[str, Any]:
        singular = collection[:-1]
        return self.request("PUT", f"/{collection}/{item_id}",
                            json={singular: changes}).json()[singular]

    def delete(self, collection: str, item_id: str) -> None:
        self.request("DELETE", f"/{collection}/{item_id}", expect=(204,))

    # --- ports ----------------------------------------------------------------

    def port(self, port_id: str) -> dict[str, Any]:
        return self._one("ports", port_id)

    def port_quota(self, project_id: str) -> int:
        """The project's port quota (`GET /quotas/{project}`); -1: unlimited."""
        _check_id("project", project_id)
        return int(self.request("GET", f"/quotas/{project_id}").json()["quota"]["port"])

    def ports(self, **filters: Any) -> list[dict[str, Any]]:
        """Ports matching `filters`; a `device_id` list is asked for in slices (a long
        query string is refused by some proxies)."""
        device_ids = filters.get("device_id")
        if isinstance(device_ids, list) and len(device_ids) > IDS_PER_QUERY:
            found: list[dict[str, Any]] = []
            for start in range(0, len(device_ids), IDS_PER_QUERY):
                found += self._list("ports", {**filters,
                                              "device_id": device_ids[start:start + IDS_PER_QUERY]})
            return found
        return self._list("ports", filters)

    def create_port(self, port: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", "/ports", expect=(201,), json={"port": port}).json()["port"]

    def update_port(self, port_id: str, changes: dict[str, Any],
                    revision: int | None = None) -> dict[str, Any]:
        """`changes` to the port; with `revision`, only if the port is still at that
        revision (Neutron's `If-Match`; 412 if it changed meanwhile)."""
        headers = {"If-Match": f"revision_number={revision}"} if revision is not None else {}
        return self.request("PUT", f"/ports/{port_id}", json={"port": changes},
                            headers=headers).json()["port"]

    def delete_port(self, port_id: str) -> bool:
        """Delete the port; False if it was gone already."""
        try:
            self.request("DELETE", f"/ports/{port_id}", expect=(204,))
        except NotFound:
            return False
        return True

    # --- port bindings (Neutron's `binding-extended`: one binding per host, one active) --

    def port_bindings(self, port_id: str) -> list[dict[str, Any]]:
        """The port's bindings: `host`, `status` (ACTIVE or INACTIVE), `vif_type`, ..."""
        _check_id("port", port_id)
        return self.request("GET", f"/ports/{port_id}/bindings").json()["bindings"]

    def create_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        """An inactive binding of the port for `host` (a live move's destination); 409 if
        the port has one for that host already."""
        _check_id("port", port_id)
        return self.request("POST", f"/ports/{port_id}/bindings", expect=(201,),
                            json={"binding": {"host": host}}).json()["binding"]

    def activate_port_binding(self, port_id: str, host: str) -> dict[str, Any]:
        """The port's binding for `host` made the active one (the one active before becomes
        inactive); 409 if it is active already."""
        _check_id("port", port_id)
        body = self.request("PUT", f"/ports/{port_id}/bindings/{_path(host)}/activate").json()
        return body.get("binding", body)  # Neutron 2025.2 answers without the envelope

    def delete_port_binding(self, port_id: str, host: str) -> bool:
        """The port's binding for `host` deleted; False if there was none."""
        _check_id("port", port_id)
        try:
            self.request("DELETE", f"/ports/{port_id}/bindings/{_path(host)}", expect=(204,))
        except NotFound:
            return False
        return True


def _check_id(kind: str, item_id: str) -> None:
    """An id as Neutron makes them, before it goes into a path (NotFound otherwise)."""
    if not re.fullmatch(r"[0-9a-fA-F-]{1,64}", item_id or ""):
        raise NotFound(f"{kind} {item_id!r}: not an id")


def _path(segment: str) -> str:
    """A host name as one path segment."""
    return urllib.parse.quote(segment, safe="")
