"""etcd's users and roles for the cluster: least privilege for every host.

With `--client-cert-auth` and auth enabled, etcd takes a client's user from
the common name of its certificate (see `pki.py`). Roles:

- `root`: etcd's own, for managing users and roles (certificate CN `root`);
- `operator`: read and write everything under our prefix (schedule.py, the
  controller `schedule.py serve`, operators' certificates), the scheduler
  service's queue `/queue/` (only operators ask for instances) and the zone
  keys (`/zones/` with the paths of the credentials held for child zones,
  `/zone-of/`, `/zone-intents/`), which no other role reaches;
- `compute-<rp_uuid>`, one per host: read and write its own prefix
  `/hosts/<rp_uuid>/` (its specs, records, booted and console keys), its own
  `/alive/<rp_uuid>` and `/stats/<rp_uuid>` keys, and read the controller's
  leader key and its own `/maintenance/<rp_uuid>` key. Nothing else: it cannot
  read another host's specs (tenants' user-data) nor write anything of another
  host's, and nothing under `/queue/` (requests carry tenants' user-data).

Every call is idempotent ("already exists" is fine), so `setup` and
`add_host` can be run again after a partial failure.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable

import grpc
from pyetcd import etcdrpc

from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd import Store, prefix_end
from etcd_compute.keys import Keys
from etcd_compute.pki import compute_name

ROOT = "root"
OPERATOR_ROLE = "operator"
READ, WRITE, READWRITE = (etcdrpc.Permission.READ, etcdrpc.Permission.WRITE,
                          etcdrpc.Permission.READWRITE)


def _already(exc: grpc.RpcError) -> bool:
    return exc.code() == grpc.StatusCode.FAILED_PRECONDITION and \
        "already" in (exc.details() or "")


def host_permissions(keys: Keys, rp_uuid: str) -> list[tuple[int, str, str]]:
    """(permission, key, range_end) a compute host gets: its own keys, nothing more.
    An empty range_end is that one key."""
    return [
        (READWRITE, keys.host(rp_uuid), prefix_end(keys.host(rp_uuid))),
        (READWRITE, keys.alive(rp_uuid), ""),
        (READWRITE, keys.stats(rp_uuid), ""),
        (READ, keys.leader(), ""),
        (READ, keys.maintenance(rp_uuid), ""),
    ]


def operator_permissions(keys: Keys) -> list[tuple[int, str, str]]:
    """Everything under our prefix ("/..." when the prefix is empty)."""
    everything = f"{keys.prefix}/"
    return [(READWRITE, everything, prefix_end(everything))]


class EtcdAuth:
    """Users and roles through a Store connected as root (or before auth is enabled)."""

    def __init__(self, store: Store):
        self.store = store
        self.keys = store.keys

    def _call(self, method: str, request: object) -> None:
        stub = self.store.client.authstub
        with self.store.errors():
            try:
                getattr(stub, method)(request, self.store.config["timeout"],
                                      credentials=self.store.client.call_credentials,
                                      metadata=self.store.client.metadata)
            except grpc.RpcError as exc:
                if not _already(exc):
                    raise

    def ensure_user(self, name: str, roles: Iterable[str]) -> None:
        """A user that logs in by certificate: its password is random and never used."""
        self._call("UserAdd", etcdrpc.AuthUserAddRequest(name=name,
                                                         password=secrets.token_hex(24)))
        for role in roles:
            self._call("UserGrantRole", etcdrpc.AuthUserGrantRoleRequest(user=name, role=role))

    def ensure_role(self, name: str, permissions: list[tuple[int, str, str]]) -> None:
        self._call("RoleAdd", etcdrpc.AuthRoleAddRequest(name=name))
        for perm_type, key, range_end in permissions:
            permission = etcdrpc.Permission(permType=perm_type, key=key.encode(),
                                            range_end=range_end.encode())
            self._call("RoleGrantPermission",
                       etcdrpc.AuthRoleGrantPermissionRequest(name=name, perm=permission))

    def setup(self, operators: Iterable[str] = ()) -> None:
        """root, the operator role (and these operator users), then auth on."""
        self._call("RoleAdd", etcdrpc.AuthRoleAddRequest(name=ROOT))
        self.ensure_user(ROOT, [ROOT])
        self.ensure_role(OPERATOR_ROLE, operator_permissions(self.keys))
        for name in operators:
            self.ensure_user(name, [OPERATOR_ROLE])
        self._call("AuthEnable", etcdrpc.AuthEnableRequest())

    def add_operator(self, name: str) -> None:
        self.ensure_role(OPERATOR_ROLE, operator_permissions(self.keys))
        self.ensure_user(name, [OPERATOR_ROLE])

    def add_host(self, rp_uuid: str) -> str:
        """The host's own role and its user (the CN of its certificate); returns the user."""
        user = compute_name(rp_uuid)
        self.ensure_role(user, host_permissions(self.keys, rp_uuid))
        self.ensure_user(user, [user])
        return user

    def remove_host(self, rp_uuid: str) -> None:
        user = compute_name(rp_uuid)
        for method, request in (("UserDelete", etcdrpc.AuthUserDeleteRequest(name=user)),
                                ("RoleDelete", etcdrpc.AuthRoleDeleteRequest(role=user))):
            try:
                self._call(method, request)
            except EtcdComputeError as exc:
                if "not found" not in str(exc):
                    raise
