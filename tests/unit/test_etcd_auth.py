"""etcd_auth.py: what each role may reach (a host its own keys and nothing of another's, an
operator everything under the prefix), and the users and roles written through etcd's auth
API, against an in-memory stand-in of that API: idempotent, auth enabled last, refusals in one
line. The roles enforced by a real etcd: tests/compute/test_host_credentials.py."""

from __future__ import annotations

import uuid as uuidlib
from types import SimpleNamespace
from typing import Any

import grpc
import pytest

from etcd_compute.errors import EtcdComputeError
from etcd_compute.etcd_auth import (
    OPERATOR_ROLE,
    READ,
    READWRITE,
    WRITE,
    EtcdAuth,
    host_permissions,
    operator_permissions,
)
from etcd_compute.etcd_connection import PermissionDenied, etcd_errors
from etcd_compute.keys import Keys

HOST, OTHER = "0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a10", "0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a11"
INSTANCE = str(uuidlib.uuid4())


def permits(permissions: list[tuple[int, str, str]], key: str, wanted: int) -> bool:
    """What etcd checks: a permission of that type (or READWRITE) whose range holds `key`."""
    for kind, start, end in permissions:
        inside = key == start if not end else start <= key < end
        if inside and kind in (wanted, READWRITE):
            return True
    return False


# -- what a role reaches ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "/prod"])
def test_a_host_reads_and_writes_its_own_keys(prefix):
    keys = Keys(prefix)
    granted = host_permissions(keys, HOST)
    for key in (keys.spec(HOST, INSTANCE), keys.record(HOST, INSTANCE),
                keys.booted(HOST, INSTANCE), keys.console(HOST, INSTANCE),
                keys.alive(HOST), keys.stats(HOST)):
        assert permits(granted, key, READ) and permits(granted, key, WRITE), key
    for key in (keys.leader(), keys.maintenance(HOST)):  # read, never written by a host
        assert permits(granted, key, READ) and not permits(granted, key, WRITE), key


@pytest.mark.parametrize("prefix", ["", "/prod"])
def test_a_host_reaches_nothing_of_another_host_or_of_the_operators(prefix):
    keys = Keys(prefix)
    granted = host_permissions(keys, HOST)
    for key in (keys.spec(OTHER, INSTANCE), keys.record(OTHER, INSTANCE),
                keys.host(HOST[:-1]) + "x", keys.host(HOST)[:-1] + "0/x",  # near its range
                keys.alive(OTHER), keys.alive(HOST) + "/x", keys.stats(OTHER),
                keys.maintenance(OTHER), keys.location(INSTANCE),
                keys.group_member("g", INSTANCE), keys.zone("child"), keys.zone_of(INSTANCE),
                keys.zone_intent(INSTANCE), f"/elsewhere{keys.host(HOST)}"):
        assert not permits(granted, key, READ) and not permits(granted, key, WRITE), key


def test_an_operator_reaches_everything_under_the_prefix_and_nothing_beside():
    keys = Keys("/prod")
    granted = operator_permissions(keys)
    for key in (keys.spec(HOST, INSTANCE), keys.alive(OTHER), keys.leader(), keys.zone("a"),
                keys.zone_intent(INSTANCE), keys.location(INSTANCE)):
        assert permits(granted, key, READ) and permits(granted, key, WRITE), key
    for key in ("/production/hosts/x", "/pro", "/other/hosts/x"):
        assert not permits(granted, key, READ), key
    assert operator_permissions(Keys("")) == [(READWRITE, "/", "0")]


# -- users and roles through the auth API ----------------------------------------------------


class Refused(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str):
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


def precondition(details: str) -> Refused:
    return Refused(grpc.StatusCode.FAILED_PRECONDITION, f"etcdserver: {details}")


class AuthApi:
    """etcd's Auth service as far as we use it: users, roles, permissions, the switch."""

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {}
        self.roles: dict[str, list[tuple[int, str, str]]] = {}
        self.enabled = False
        self.calls: list[str] = []
        self.sent: list[tuple[Any, ...]] = []
        self.refuse: dict[str, Refused] = {}

    def __getattr__(self, method: str) -> Any:
        handler = getattr(self, f"_{method}")

        def call(request: Any, timeout: float, credentials: Any, metadata: Any) -> None:
            self.calls.append(method)
            self.sent.append((timeout, credentials, metadata))
            if method in self.refuse:
                raise self.refuse[method]
            handler(request)
        return call

    def _UserAdd(self, request: Any) -> None:
        if request.name in self.users:
            raise precondition("user name already exists")
        self.users[request.name] = {"password": request.password, "roles": set()}

    def _UserGrantRole(self, request: Any) -> None:
        if request.user not in self.users:
            raise precondition("user name not found")
        if request.role not in self.roles:
            raise precondition("role name not found")
        self.users[request.user]["roles"].add(request.role)

    def _UserDelete(self, request: Any) -> None:
        if self.users.pop(request.name, None) is None:
            raise precondition("user name not found")

    def _RoleAdd(self, request: Any) -> None:
        if request.name in self.roles:
            raise precondition("role name already exists")
        self.roles[request.name] = []

    def _RoleGrantPermission(self, request: Any) -> None:
        granted = (request.perm.permType, request.perm.key.decode(),
                   request.perm.range_end.decode())
        if granted not in self.roles[request.name]:
            self.roles[request.name].append(granted)

    def _RoleDelete(self, request: Any) -> None:
        if self.roles.pop(request.role, None) is None:
            raise precondition("role name not found")

    def _AuthEnable(self, request: Any) -> None:
        if "root" not in self.users or "root" not in self.users["root"]["roles"]:
            raise precondition("root user does not have root role")
        self.enabled = True


@pytest.fixture
def api() -> AuthApi:
    return AuthApi()


@pytest.fixture
def auth(api: AuthApi) -> EtcdAuth:
    client = SimpleNamespace(authstub=api, call_credentials="root's certificate",
                             metadata=(("token", "t"),))
    store: Any = SimpleNamespace(keys=Keys("/prod"), config={"timeout": 2.5}, client=client,
                                 errors=lambda: etcd_errors(["10.0.0.1:2379"]))
    return EtcdAuth(store)


def test_setup_makes_root_the_operator_role_and_users_then_turns_auth_on(auth, api):
    auth.setup(["alice", "bob"])
    assert api.enabled and api.calls[-1] == "AuthEnable"
    assert api.roles == {"root": [], OPERATOR_ROLE: operator_permissions(Keys("/prod"))}
    assert {name: user["roles"] for name, user in api.users.items()} == {
        "root": {"root"}, "alice": {OPERATOR_ROLE}, "bob": {OPERATOR_ROLE}}


def test_setup_again_changes_nothing_and_fails_on_nothing(auth, api):
    auth.setup(["alice"])
    before = {name: dict(user) for name, user in api.users.items()}, dict(api.roles)
    auth.setup(["alice"])
    auth.add_operator("alice")
    assert ({name: dict(user) for name, user in api.users.items()}, dict(api.roles)) == before


def test_users_log_in_by_certificate_their_passwords_are_random_and_unshared(auth, api):
    auth.setup(["alice", "bob"])
    passwords = [user["password"] for user in api.users.values()]
    assert len(set(passwords)) == 3 and all(len(p) == 48 for p in passwords)


def test_each_call_carries_the_timeout_and_roots_credentials(auth, api):
    auth.add_host(HOST)
    assert set(api.sent) == {(2.5, "root's certificate", (("token", "t"),))}


def test_a_host_gets_a_role_of_its_own_named_like_its_certificate(auth, api):
    assert auth.add_host(HOST) == f"compute-{HOST}"
    auth.add_host(HOST)  # again, after a partial failure say
    auth.add_host(OTHER)
    assert api.roles[f"compute-{HOST}"] == host_permissions(Keys("/prod"), HOST)
    assert api.users[f"compute-{HOST}"]["roles"] == {f"compute-{HOST}"}
    assert api.users[f"compute-{OTHER}"]["roles"] == {f"compute-{OTHER}"}


def test_removing_a_host_removes_its_user_and_role_and_may_be_repeated(auth, api):
    auth.add_host(HOST)
    auth.add_host(OTHER)
    auth.remove_host(HOST)
    auth.remove_host(HOST)
    assert set(api.users) == set(api.roles) == {f"compute-{OTHER}"}


def test_a_refusal_other_than_already_done_is_one_line(auth, api):
    api.refuse["AuthEnable"] = precondition("root user does not exist\n(details)")
    with pytest.raises(EtcdComputeError) as raised:
        auth.setup()
    assert str(raised.value) == ("etcd refused the request: FAILED_PRECONDITION: "
                                 "etcdserver: root user does not exist (details)")
    assert not api.enabled


def test_removing_a_host_without_the_right_to_says_so(auth, api):
    auth.add_host(HOST)
    api.refuse["UserDelete"] = Refused(grpc.StatusCode.PERMISSION_DENIED,
                                       "etcdserver: permission denied")
    with pytest.raises(PermissionDenied, match="PERMISSION_DENIED"):
        auth.remove_host(HOST)
    assert f"compute-{HOST}" in api.roles  # stopped at the first refusal

