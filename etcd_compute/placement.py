"""A small client for the OpenStack Placement API (microversion 1.39).

Reads like the task: `client.ensure_provider(uuid, name)`,
`client.set_inventory(uuid, inventory)`, `client.claim(consumer, allocations)`.
Errors come back as one-line exceptions: PlacementUnavailable (a
ServiceUnavailable) when Placement cannot be reached, ConflictError for 409s
(generation races, capacity), PlacementError for anything else.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from etcd_compute import metrics
from etcd_compute.errors import (
    ConfigError,
    ConflictError,
    NotFound,
    PlacementError,
    PlacementUnavailable,
)
from etcd_compute.keystone import session as keystone_session

if TYPE_CHECKING:
    import requests

LOG = logging.getLogger(__name__)

MICROVERSION = "1.39"
# The standard trait that makes a provider unschedulable (Nova's choice too): a stopped
# compute sets it, an operator may; the inventory stays truthful.
DISABLED_TRAIT = "COMPUTE_STATUS_DISABLED"
# Placement's error codes for 409s we handle by refreshing and trying again.
CONCURRENT_UPDATE = "placement.concurrent_update"
INVENTORY_IN_USE = "placement.inventory.inuse"
GENERATION_RETRIES = 10


def _one_line(text: str) -> str:
    """Placement's multi-line error details folded into one line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " ".join(lines)[:400]


def _tls(placement_config: dict[str, Any]) -> tuple[str | bool, tuple[str, str] | None]:
    """(what requests verifies the server with, our client certificate) from the config."""
    ca, cert, key = (placement_config.get(name) for name in ("ca_cert", "cert", "key"))
    if bool(cert) != bool(key):
        raise ConfigError("placement.cert and placement.key go together")
    for setting, path in (("ca_cert", ca), ("cert", cert), ("key", key)):
        if path and not Path(path).is_file():
            raise ConfigError(f"placement.{setting} {path}: no such file")
    return (ca or True), ((cert, key) if cert and key else None)


class KeystoneTokens:
    """Keystone tokens for Placement (keystoneauth1 caches one and renews it before expiry)."""

    def __init__(self, keystone: dict[str, Any], verify: str | bool, timeout: float):
        self.auth_url = keystone["auth_url"]
        self.session = keystone_session(keystone, verify, timeout)

    def token(self) -> str:
        from keystoneauth1 import exceptions as ks_exceptions

        try:
            return self.session.get_token()
        except ks_exceptions.Unauthorized:
            metrics.backend_error("placement")
            raise PlacementUnavailable("Keystone refused our credentials "
                                       "(placement.keystone)") from None
        except ks_exceptions.ClientException as exc:
            metrics.backend_error("placement")
            raise PlacementUnavailable(f"Keystone at {self.auth_url}: "
                                       f"{_one_line(str(exc))[:200]}") from None

    def invalidate(self) -> None:
        """Forget the cached token (Placement refused it: revoked, or Keystone restarted
        with new keys); the next `token()` authenticates again."""
        self.session.invalidate()


class PlacementClient:
    def __init__(self, placement_config: dict[str, Any]):
        self.endpoint = placement_config["endpoint"].rstrip("/")
        self.timeout = placement_config["timeout"]
        self._token = placement_config["token"]
        # Passed with every request: requests lets REQUESTS_CA_BUNDLE override a session's.
        self.verify, self.cert = _tls(placement_config)
        self.keystone: KeystoneTokens | None = None
        if placement_config.get("keystone"):
            self.keystone = KeystoneTokens(placement_config["keystone"], self.verify,
                                           self.timeout)
        # Counted for benchmarks and `schedule.py --json`.
        self.conflicts = 0
        # CUSTOM_* traits this client already made sure exist.
        self._custom_traits: set[str] = set()

    # --- transport -----------------------------------------------------------

    @functools.cached_property
    def session(self) -> requests.Session:
        """Made (and `requests` imported, ~40 ms of CPU) at the first request: a command
        that holds a client but never asks Placement (`schedule.py destroy` of an instance
        whose host is up, `schedule.py UUID`) does not pay for it."""
        import requests

        session = requests.Session()
        session.headers.update({
            "x-auth-token": self._token,
            "openstack-api-version": f"placement {MICROVERSION}",
            "accept": "application/json",
        })
        return session

    def request(self, method: str, path: str, json: Any = None,
                expect: tuple[int, ...] = (200,)) -> requests.Response:
        response = self._send(method, path, json)
        if response.status_code == 401 and self.keystone is not None:
            # A token Keystone no longer honours: once more with a fresh one (as
            # keystoneauth1's own session does).
            self.keystone.invalidate()
            response = self._send(method, path, json)
        if response.status_code in expect:
            return response
        if response.status_code >= 500 or response.status_code in (401, 403):
            metrics.backend_error("placement")
        self._raise_for(method, path, response)
        raise AssertionError("unreachable")

    def _send(self, method: str, path: str, json: Any) -> requests.Response:
        import requests

        url = self.endpoint + path
        headers = {"x-auth-token": self.keystone.token()} if self.keystone else None
        try:
            response = self.session.request(method, url, json=json, timeout=self.timeout,
                                            headers=headers, verify=self.verify,
                                            cert=self.cert)
        except requests.exceptions.SSLError as exc:
            metrics.backend_error("placement")
            found = re.search(r"\[SSL: [A-Z0-9_]+\][^(]*", str(exc))
            reason = found.group(0).strip() if found else _one_line(str(exc))[-200:]
            raise PlacementUnavailable(
                f"Placement at {self.endpoint}: TLS handshake failed ({reason}); check "
                "placement.ca_cert/cert/key against the cluster CA") from None
        except requests.RequestException as exc:
            metrics.backend_error("placement")
            raise PlacementUnavailable(
                f"Placement at {self.endpoint} is unreachable ({exc.__class__.__name__}); "
                "check that it runs and placement.endpoint in the config"
            ) from None
        return response

    def _raise_for(self, method: str, path: str, response: requests.Response) -> None:
        code, detail = None, _one_line(response.text)
        try:
            error = response.json()["errors"][0]
            code, detail = error.get("code"), _one_line(error.get("detail", detail))
        except (ValueError, KeyError, IndexError, TypeError):
            pass
        message = f"Placement {method} {path.split('?')[0]}: {response.status_code} {detail}"
        if response.status_code == 409:
            self.conflicts += 1
            raise ConflictError(message, 409, code)
        if response.status_code == 404:
            raise NotFound(message)
        if response.status_code in (401, 403):
            raise PlacementUnavailable(f"{message}; check placement.keystone (its user needs "
                                       "the service or admin role)" if self.keystone
                                       else f"{message}; check placement.token")
        raise PlacementError(message, response.status_code, code)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        query = f"?{urlencode(params)}" if params else ""
        return self.request("GET", path + query).json()

    # --- resource providers ----------------------------------------------------

    def get_provider(self, uuid: str) -> dict[str, Any] | None:
        try:
            return self.get(f"/resource_providers/{uuid}")
        except NotFound:
            return None

    def list_providers(self, **filters: Any) -> list[dict[str, Any]]:
        return self.get("/resource_providers", **filters)["resource_providers"]

    def ensure_provider(self, uuid: str, name: str) -> dict[str, Any]:
        """The provider with `uuid`, created (or renamed to `name`) as needed."""
        provider = self.get_provider(uuid)
        if provider is None:
            try:
                # From microversion 1.20 the answer is the new provider itself.
                return self.request("POST", "/resource_providers",
                                    json={"uuid": uuid, "name": name}, expect=(200,)).json()
            except ConflictError:
                taken = self.list_providers(name=name)
                if taken and taken[0]["uuid"] != uuid:
                    raise ConflictError(
                        f"a resource provider named {name!r} already exists with uuid "
                        f"{taken[0]['uuid']}; set compute.name or compute.uuid", 409,
                    ) from None
            provider = self.get_provider(uuid)
            if provider is None:
                raise PlacementError(f"resource provider {uuid} vanished after creation")
        elif provider["name"] != name:
            provider = self.request(
                "PUT", f"/resource_providers/{uuid}", json={"name": name}
            ).json()
        return provider

    def delete_provider(self, uuid: str) -> None:
        self.request("DELETE", f"/resource_providers/{uuid}", expect=(204, 404))

    def _with_generation(self, uuid: str, path: str, build_body: Any,
                         generation: int | None = None) -> dict[str, Any]:
        """PUT `build_body(generation)` to `path`, unless `path` already holds it; on a
        generation conflict, read `path` again (its generation and what it holds).

        Every claim on the provider moves its generation: a host restarting while claims
        flow lost every try of writing the inventory it already had, and exited. Pass the
        generation a previous write returned to save a read.
        """
        for _ in range(GENERATION_RETRIES):
            if generation is None:
                try:
                    current = self.get(path)
                except NotFound:
                    raise NotFound(f"resource provider {uuid} does not exist") from None
                generation = current["resource_provider_generation"]
                if _same_content(current, build_body(generation)):
                    return current
            try:
                return self.request("PUT", path, json=build_body(generation)).json()
            except ConflictError as exc:
                if exc.code != CONCURRENT_UPDATE:
                    raise
                LOG.debug("generation conflict on %s, retrying", path)
                generation = None
        raise ConflictError(f"provider {uuid}: generation kept changing on {path}", 409,
                            CONCURRENT_UPDATE)

    def set_inventory(self, uuid: str, inventories: dict[str, dict[str, Any]],
                      generation: int | None = None) -> int:
        """Replace the provider's inventory; returns the provider's new generation."""
        return self._with_generation(
            uuid, f"/resource_providers/{uuid}/inventories",
            lambda gen: {"resource_provider_generation": gen, "inventories": inventories},
            generation,
        )["resource_provider_generation"]

    def get_inventories(self, uuid: str) -> dict[str, dict[str, Any]]:
        return self.get(f"/resource_providers/{uuid}/inventories")["inventories"]

    def get_usages(self, uuid: str) -> dict[str, int]:
        return self.get(f"/resource_providers/{uuid}/usages")["usages"]

    def get_traits(self, uuid: str) -> set[str]:
        return set(self.get(f"/resource_providers/{uuid}/traits")["traits"])

    def ensure_custom_traits(self, traits: set[str]) -> None:
        """Create the CUSTOM_* traits among `traits` (each once per client)."""
        for trait in sorted(t for t in traits - self._custom_traits if t.startswith("CUSTOM_")):
            self.request("PUT", f"/traits/{trait}", expect=(201, 204))
            self._custom_traits.add(trait)

    def known_traits(self, traits: set[str]) -> set[str]:
        """The subset of `traits` Placement knows (standard os-traits or created custom)."""
        if not traits:
            return set()
        listed = self.get("/traits", name="in:" + ",".join(sorted(traits)))["traits"]
        return set(listed)

    def set_traits(self, uuid: str, traits: set[str], generation: int | None = None) -> int:
        """Replace the provider's traits; returns its new generation."""
        self.ensure_custom_traits(traits)
        return self._with_generation(
            uuid, f"/resource_providers/{uuid}/traits",
            lambda gen: {"resource_provider_generation": gen, "traits": sorted(traits)},
            generation,
        )["resource_provider_generation"]

    def set_aggregates(self, uuid: str, aggregates: list[str],
                       generation: int | None = None) -> int:
        """Replace the provider's aggregates; returns its new generation."""
        return self._with_generation(
            uuid, f"/resource_providers/{uuid}/aggregates",
            lambda gen: {"resource_provider_generation": gen, "aggregates": sorted(aggregates)},
            generation,
        )["resource_provider_generation"]

    def get_aggregates(self, uuid: str) -> list[str]:
        return list(self.get(f"/resource_providers/{uuid}/aggregates")["aggregates"])

    def change_aggregates(self, uuid: str, add: Iterable[str] = (),
                          remove: Iterable[str] = ()) -> list[str]:
        """Add and remove aggregates of the provider, keeping its others (each writer
        changes only its own: the host its zones and shard, the API its aggregates);
        a generation conflict reads them again. Returns the provider's aggregates."""
        path = f"/resource_providers/{uuid}/aggregates"
        for _ in range(GENERATION_RETRIES):
            try:
                current = self.get(path)
            except NotFound:
                raise NotFound(f"resource provider {uuid} does not exist") from None
            wanted = sorted((set(current["aggregates"]) | set(add)) - set(remove))
            if wanted == sorted(current["aggregates"]):
                return wanted
            try:
                self.request("PUT", path, json={
                    "resource_provider_generation": current["resource_provider_generation"],
                    "aggregates": wanted})
                return wanted
            except ConflictError as exc:
                if exc.code != CONCURRENT_UPDATE:
                    raise
        raise ConflictError(f"provider {uuid}: generation kept changing on {path}", 409,
                            CONCURRENT_UPDATE)

    # --- candidates and claims ----------------------------------------------------

    def allocation_candidates(self, query: str) -> dict[str, Any]:
        """GET /allocation_candidates with an already-encoded query string."""
        return self.request("GET", f"/allocation_candidates?{query}").json()

    def get_allocations(self, consumer: str) -> dict[str, Any]:
        """{"allocations": {rp: {"resources": ...}}, "consumer_generation": ...}."""
        return self.get(f"/allocations/{consumer}")

    def claim(self, consumer: str, allocations: dict[str, Any], project_id: str,
              user_id: str, consumer_type: str = "INSTANCE",
              consumer_generation: int | None = None) -> None:
        """Claim `allocations` ({rp: {"resources": {...}}}) for one consumer, atomically."""
        body = {
            "allocations": allocations,
            "project_id": project_id,
            "user_id": user_id,
            "consumer_generation": consumer_generation,
            "consumer_type": consumer_type,
        }
        self.request("PUT", f"/allocations/{consumer}", json=body, expect=(204,))

    def claim_many(self, claims: dict[str, dict[str, Any]], project_id: str, user_id: str,
                   consumer_type: str = "INSTANCE",
                   owners: dict[str, tuple[str, str]] | None = None) -> None:
        """Claim for several consumers in one atomic POST /allocations: all or nothing.

        `claims` maps consumer uuid to its allocations ({rp: {"resources": ...}});
        `owners` a consumer to its (project, user) where they are not the default ones.
        """
        owners = owners or {}
        body = {}
        for consumer, allocations in claims.items():
            project, user = owners.get(consumer, (project_id, user_id))
            body[consumer] = {
                "allocations": allocations,
                "project_id": project,
                "user_id": user,
                "consumer_generation": None,
                "consumer_type": consumer_type,
            }
        self.request("POST", "/allocations", json=body, expect=(204,))

    def replace_allocations(self, consumer: str, allocations: dict[str, Any],
                            consumer_generation: int | None, project_id: str, user_id: str,
                            consumer_type: str = "INSTANCE") -> None:
        """Set one consumer's allocations, `{}` removing them, only if its generation is
        still `consumer_generation` (POST /allocations: the form that may empty a claim)."""
        body = {consumer: {"allocations": allocations, "project_id": project_id,
                           "user_id": user_id, "consumer_generation": consumer_generation,
                           "consumer_type": consumer_type}}
        self.request("POST", "/allocations", json=body, expect=(204,))

    def project_usages(self, project_id: str, consumer_type: str,
                       user_id: str | None = None) -> dict[str, int]:
        """What `project_id`'s (and `user_id`'s) consumers of `consumer_type` hold, per
        resource class, and how many of them there are (`consumer_count`)."""
        params = {"project_id": project_id, "consumer_type": consumer_type}
        if user_id is not None:
            params["user_id"] = user_id
        usages = self.get("/usages", **params)["usages"]
        found = usages.get(consumer_type) or {}
        return {rc: int(amount) for rc, amount in found.items()}

    def replace_many(self, claims: dict[str, dict[str, Any]],
                     consumer_type: str = "INSTANCE") -> None:
        """Set several consumers' allocations in one atomic POST /allocations, each only if
        its generation is still the one given: {consumer: {"allocations", "project_id",
        "user_id", "consumer_generation"[, "consumer_type"]}} (empty allocations free the
        consumer's). All or nothing (409 if any does not hold)."""
        body = {consumer: {"consumer_type": consumer_type, **claim}
                for consumer, claim in claims.items()}
        self.request("POST", "/allocations", json=body, expect=(204,))

    def delete_allocations(self, consumer: str) -> bool:
        """Free a consumer's allocations; False if it had none."""
        response = self.request("DELETE", f"/allocations/{consumer}", expect=(204, 404))
        return response.status_code == 204

    def check(self) -> str:
        root = self.request("GET", "/").json()
        version = root["versions"][0]
        return f"Placement {version['min_version']}..{version['max_version']} at {self.endpoint}"


def _same_content(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether a provider's inventories, traits or aggregates as read (`current`) are what
    `wanted` would write (generations aside; lists in any order)."""
    def plain(body: dict[str, Any]) -> dict[str, Any]:
        return {key: sorted(value) if isinstance(value, list) else value
                for key, value in body.items() if key != "resource_provider_generation"}

    return plain(current) == plain(wanted)
