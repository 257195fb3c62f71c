"""The compute API in-process over FakeStore and FakePlacement, with auth_token's identity
headers given by the test (the real middleware is in tests/api)."""

from __future__ import annotations

import json
import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

import webob

from etcd_compute import config as configuration
from etcd_compute import defaults, messages
from etcd_compute.api.app import make_app
from etcd_compute.api.backend import Backend
from etcd_compute.api.objects.flavors import Flavor
from etcd_compute.api.policy import Policy
from etcd_compute.instances import host as host_txns
from etcd_compute.instances import records
from etcd_compute.network_backend import backend_of, trait_of
from tests.unit.fake_neutron import FakeNeutron
from tests.unit.fakes import FakePlacement, FakeStore

MEMBER = ("member", "reader")
ADMIN = ("admin", "member", "reader")


def api_config(**api: Any) -> dict[str, Any]:
    return configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "scheduler": {"use_service": False, "default_image": "file:///dev/null",
                      "etcd_max_txn_ops": 4096},
        "api": {"image_url_prefixes": ["file:///dev/"], **api}})


# The default rules, read-only once built: one Enforcer for every harness that takes them
# (registering Nova's defaults costs ~10 ms, and hundreds of tests build a harness).
DEFAULT_POLICY: list[Policy] = []


def default_policy() -> Policy:
    if not DEFAULT_POLICY:
        DEFAULT_POLICY.append(Policy())
    return DEFAULT_POLICY[0]


@dataclass
class Harness:
    store: FakeStore
    placement: FakePlacement
    backend: Backend
    app: Any

    neutron: FakeNeutron | None = None

    @classmethod
    def new(cls, neutron: FakeNeutron | None = None, **api: Any) -> Harness:
        """`neutron`: the neutron backend, over that fake Neutron (each caller sees it as
        Neutron's policy shows it); else the libvirt backend."""
        store, placement = FakeStore(), FakePlacement()
        config = api_config(**api)
        callers = None
        if neutron is not None:
            config["network"] = {**config["network"], "backend": "neutron"}
            callers = lambda context: neutron.as_caller(  # noqa: E731
                context.project_id, context.is_admin)
        policy = default_policy() if config["api"]["policy_file"] is None else None
        backend = Backend.over(config, store, placement, policy, callers)
        return cls(store, placement, backend, make_app(backend.config, backend, auth=False),
                   neutron)

    def call(self, method: str, path: str, body: Any = None, *, project: str = "p1",
             user: str = "u1", roles: tuple[str, ...] = MEMBER, version: str | None = None,
             raw: bytes | None = None, headers: dict[str, str] | None = None,
             confirmed: bool = True) -> webob.Response:
        sent = {"X-Identity-Status": "Confirmed" if confirmed else "Invalid",
                "X-User-Id": user, "X-Project-Id": project, "X-Roles": ",".join(roles),
                **(headers or {})}
        if version:
            sent["OpenStack-API-Version"] = f"compute {version}"
        request = webob.Request.blank(path, method=method, headers=sent)
        if body is not None or raw is not None:
            request.body = raw if raw is not None else json.dumps(body).encode()
            request.content_type = "application/json"
        return request.get_response(self.app)

    def admin(self, method: str, path: str, body: Any = None, **kwargs: Any) -> webob.Response:
        return self.call(method, path, body, roles=ADMIN, project="admin", user="root",
                         **kwargs)

    def add_host(self, name: str = "hv1", vcpus: int = 16, ram: int = 16384,
                 disk: int = 500, alive: bool = True) -> str:
        rp = str(uuidlib.uuid4())
        self.placement.ensure_provider(rp, name)
        # As a compute of the API's own backend registers.
        self.placement.set_traits(rp, {trait_of(backend_of(self.backend.config))})
        self.placement.set_inventory(rp, {"VCPU": {"total": vcpus},
                                          "MEMORY_MB": {"total": ram},
                                          "DISK_GB": {"total": disk}})
        if alive:
            self.store.put(messages.ALIVE, self.store.keys.alive(rp),
                           {"host": rp, "name": name, "since": time.time()})
        return rp

    def add_flavor(self, flavor_id: str = "1", name: str = "m1.tiny", vcpus: int = 1,
                   ram: int = 256, disk: int = 1, **more: Any) -> Flavor:
        return self.backend.flavors.create(Flavor(flavor_id, name, vcpus, ram, disk, **more))

    def boot(self, name: str = "web", project: str = "p1", user: str = "u1",
             version: str | None = None, **fields: Any) -> str:
        body = {"server": {"name": name, "flavorRef": "1", "imageRef": "file:///dev/null",
                           **fields}}
        response = self.call("POST", "/v2.1/servers", body, project=project, user=user,
                             version=version)
        assert response.status_int == 202, response.text
        return str(response.json["server"]["id"])

    def activate(self, uuid: str, ip: str = "192.168.123.10") -> None:
        """What the host does: BUILDING, then ACTIVE with its IP."""
        host = records.locate(self.store, uuid)["host"]
        read = records.read_record(self.store, host, uuid)
        spec_entry = self.store.get(self.store.keys.spec(host, uuid))
        spec = messages.decode(messages.INSTANCE_SPEC, spec_entry.value)
        assert host_txns.begin_build(self.store, spec, spec_entry.mod_revision, read,
                                     "hv1") is not None
        assert host_txns.activate(self.store, records.read_record(self.store, host, uuid),
                                  ip) is not None

    def host_does(self, uuid: str, error: str | None = None) -> dict[str, Any]:
        """What the host does with the action in the instance's spec: takes it up and ends
        it (in error if `error`); the record then."""
        from etcd_compute.instances import actions as action_txn

        host = records.locate(self.store, uuid)["host"]
        entry = self.store.get(self.store.keys.spec(host, uuid))
        spec = messages.decode(messages.INSTANCE_SPEC, entry.value)
        assert action_txn.begin_action(self.store, spec, entry.mod_revision,
                                       records.read_record(self.store, host, uuid))
        assert action_txn.end_action(self.store, records.read_record(self.store, host, uuid),
                                     self.store.get(entry.key), error)
        return records.read_record(self.store, host, uuid).record

    def action(self, uuid: str, body: Any, **kwargs: Any) -> webob.Response:
        return self.call("POST", f"/v2.1/servers/{uuid}/action", body, **kwargs)

    def show(self, uuid: str, **kwargs: Any) -> dict[str, Any]:
        return dict(self.call("GET", f"/v2.1/servers/{uuid}", **kwargs).json["server"])


def active(harness: Harness, **fields) -> str:
    """A server booted and made ACTIVE by its host."""
    uuid = harness.boot(**fields)
    harness.activate(uuid)
    return uuid


def spec_of(harness: Harness, uuid: str) -> dict:
    """The spec its host holds for `uuid`."""
    host = records.locate(harness.store, uuid)["host"]
    return messages.decode(messages.INSTANCE_SPEC,
                           harness.store.get(harness.store.keys.spec(host, uuid)).value)
