"""Nova's rules and defaults: readers read, members write their project's, admins all;
keypairs are their user's; a policy file overrides; a bad one is a config error.

Rule by rule: every registered rule has its default written here and is tried with each
kind of caller; every rule is met by a request through the handlers (refused by it when it
refuses everyone, and by its default to whom it refuses), shapes a view, or is listed as
asked nowhere with why; another project's member meets Nova's answer for each thing with
an owner. A rule added without its line here fails."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import webob
from oslo_context import context as oslo_context
from oslo_policy import policy as oslo_policy

from etcd_compute.api import policy
from etcd_compute.api.context import Context
from etcd_compute.api.policy import Policy, PolicyNotAuthorized
from etcd_compute.errors import ConfigError
from tests.support import REPO
from tests.unit.api.harness import ADMIN as ADMIN_ROLES
from tests.unit.api.harness import MEMBER, Harness, active
from tests.unit.api.objects.test_keypairs import SSH_KEY
from tests.unit.fake_neutron import FakeNeutron


def caller(*roles: str, project: str = "p1", user: str = "u1") -> Context:
    oslo = oslo_context.RequestContext(user_id=user, project_id=project, roles=list(roles))
    return Context(user, project, roles, "req-1", oslo)


RULES = Policy()


@pytest.mark.parametrize("roles,action,target,allowed", [
    (("reader",), policy.SERVERS % "index", None, True),
    (("reader",), policy.SERVERS % "create", None, False),
    (("member", "reader"), policy.SERVERS % "create", None, True),
    (("member", "reader"), policy.SERVERS % "show", {"project_id": "p2"}, False),
    (("admin", "member", "reader"), policy.SERVERS % "show", {"project_id": "p2"}, True),
    (("member", "reader"), policy.SERVERS % "index:get_all_tenants", None, False),
    (("member", "reader"), policy.FLAVOR_MANAGE % "create", {}, False),
    (("admin",), policy.FLAVOR_MANAGE % "create", {}, True),
    (("member",), policy.KEYPAIRS % "create", {"user_id": "u1"}, True),
    (("member",), policy.KEYPAIRS % "create", {"user_id": "u2"}, False),
    (("admin",), policy.KEYPAIRS % "index", {"user_id": "u2"}, True),
    (("member",), policy.QUOTA_SETS % "update", {"project_id": "p1"}, False),
    ((), policy.LIMITS, None, True),
    (("member",), policy.EXTENDED_ATTRIBUTES, None, False),
])
def test_novas_defaults(roles, action, target, allowed):
    assert RULES.allows(caller(*roles), action, target) is allowed


def test_a_refusal_names_the_rule_as_nova_does():
    with pytest.raises(PolicyNotAuthorized) as caught:
        RULES.authorize(caller("reader"), policy.SERVERS % "delete")
    assert str(caught.value) == \
        "Policy doesn't allow os_compute_api:servers:delete to be performed."
    assert RULES.is_admin(caller("admin")) and not RULES.is_admin(caller("member"))


def test_a_policy_file_overrides_and_a_missing_or_bad_one_is_a_config_error(tmp_path: Path):
    path = tmp_path / "policy.yaml"
    path.write_text('"os_compute_api:servers:create": "role:admin"\n')
    strict = Policy(str(path))
    assert not strict.allows(caller("member"), policy.SERVERS % "create")
    assert strict.allows(caller("member", "reader"), policy.SERVERS % "index")
    with pytest.raises(ConfigError, match="no such file"):
        Policy(str(tmp_path / "missing.yaml"))
    path.write_text("{not: [yaml")
    with pytest.raises(ConfigError, match="api.policy_file"):
        Policy(str(path))


# --- every rule: its default, the request that meets it, who it refuses --------------------
#
# Who each rule lets act by default, written out (not read from policy.py: a default changed
# there, or a rule added without a line here, fails). Nova's defaults (nova/policies/).
READ, WRITE, ADMIN, ANYONE, KEY_OWNER, SERVICE = (
    "the project's readers", "the project's members", "admins", "anyone",
    "the key's user", "the service role or admins")
SERVERS = "os_compute_api:servers:"
DEFAULTS = {
    SERVERS + "index": READ,
    SERVERS + "detail": READ,
    SERVERS + "index:get_all_tenants": ADMIN,
    SERVERS + "detail:get_all_tenants": ADMIN,
    SERVERS + "allow_all_filters": ADMIN,
    SERVERS + "show": READ,
    SERVERS + "show:flavor-extra-specs": READ,
    SERVERS + "show:host_status": ADMIN,
    SERVERS + "show:host_status:unknown-only": ADMIN,
    SERVERS + "create": WRITE,
    SERVERS + "create:forced_host": ADMIN,
    "compute:servers:create:requested_destination": ADMIN,
    SERVERS + "create:attach_network": WRITE,
    "network:attach_external_network": ADMIN,
    SERVERS + "create:zero_disk_flavor": ADMIN,
    SERVERS + "delete": WRITE,
    SERVERS + "update": WRITE,
    SERVERS + "confirm_resize": WRITE,
    SERVERS + "revert_resize": WRITE,
    SERVERS + "reboot": WRITE,
    SERVERS + "resize": WRITE,
    SERVERS + "rebuild": WRITE,
    SERVERS + "rebuild:trusted_certs": WRITE,
    SERVERS + "create_image": WRITE,
    SERVERS + "create_image:allow_volume_backed": WRITE,
    SERVERS + "start": WRITE,
    SERVERS + "stop": WRITE,
    "os_compute_api:os-suspend-server:suspend": WRITE,
    "os_compute_api:os-suspend-server:resume": WRITE,
    "os_compute_api:os-pause-server:pause": WRITE,
    "os_compute_api:os-pause-server:unpause": WRITE,
    "os_compute_api:os-console-output": WRITE,
    "os_compute_api:os-remote-consoles": WRITE,
    "os_compute_api:server-metadata:index": READ,
    "os_compute_api:server-metadata:show": READ,
    "os_compute_api:server-metadata:create": WRITE,
    "os_compute_api:server-metadata:update_all": WRITE,
    "os_compute_api:server-metadata:update": WRITE,
    "os_compute_api:server-metadata:delete": WRITE,
    "os_compute_api:ips:index": READ,
    "os_compute_api:ips:show": READ,
    "os_compute_api:os-volumes-attachments:index": READ,
    "os_compute_api:os-volumes-attachments:show": READ,
    "os_compute_api:os-instance-actions:list": READ,
    "os_compute_api:os-instance-actions:show": READ,
    "os_compute_api:os-instance-actions:events": ADMIN,
    "os_compute_api:os-instance-actions:events:details": ADMIN,
    "os_compute_api:os-server-groups:create": WRITE,
    "os_compute_api:os-server-groups:delete": WRITE,
    "os_compute_api:os-server-groups:index": READ,
    "os_compute_api:os-server-groups:index:all_projects": ADMIN,
    "os_compute_api:os-server-groups:show": READ,
    "os_compute_api:os-availability-zone:list": ANYONE,
    "os_compute_api:os-availability-zone:detail": ADMIN,
    "os_compute_api:os-services:list": ADMIN,
    "os_compute_api:os-services:update": ADMIN,
    "os_compute_api:os-services:delete": ADMIN,
    "os_compute_api:extensions": ANYONE,
    "os_compute_api:os-networks:list": ANYONE,
    "os_compute_api:os-networks:view": ANYONE,
    "os_compute_api:os-hosts:list": ADMIN,
    "os_compute_api:os-hosts:show": ADMIN,
    "os_compute_api:os-hosts:update": ADMIN,
    "os_compute_api:os-hosts:reboot": ADMIN,
    "os_compute_api:os-hosts:shutdown": ADMIN,
    "os_compute_api:os-hosts:start": ADMIN,
    "os_compute_api:os-hypervisors:list": ADMIN,
    "os_compute_api:os-hypervisors:list-detail": ADMIN,
    "os_compute_api:os-hypervisors:statistics": ADMIN,
    "os_compute_api:os-hypervisors:show": ADMIN,
    "os_compute_api:os-hypervisors:uptime": ADMIN,
    "os_compute_api:os-hypervisors:search": ADMIN,
    "os_compute_api:os-hypervisors:servers": ADMIN,
    "os_compute_api:os-extended-server-attributes": ADMIN,
    "os_compute_api:os-aggregates:index": ADMIN,
    "os_compute_api:os-aggregates:create": ADMIN,
    "os_compute_api:os-aggregates:show": ADMIN,
    "os_compute_api:os-aggregates:update": ADMIN,
    "os_compute_api:os-aggregates:delete": ADMIN,
    "os_compute_api:os-aggregates:add_host": ADMIN,
    "os_compute_api:os-aggregates:remove_host": ADMIN,
    "os_compute_api:os-aggregates:set_metadata": ADMIN,
    "os_compute_api:os-simple-tenant-usage:list": ADMIN,
    "os_compute_api:os-simple-tenant-usage:show": READ,
    "os_compute_api:os-instance-usage-audit-log:list": ADMIN,
    "os_compute_api:os-instance-usage-audit-log:show": ADMIN,
    "os_compute_api:os-migrations:index": ADMIN,
    "os_compute_api:os-security-groups:list": READ,
    "os_compute_api:os-attach-interfaces:list": READ,
    "os_compute_api:os-attach-interfaces:show": READ,
    "os_compute_api:os-attach-interfaces:create": WRITE,
    "os_compute_api:os-attach-interfaces:delete": WRITE,
    "os_compute_api:os-security-groups:add": WRITE,
    "os_compute_api:os-security-groups:remove": WRITE,
    "os_compute_api:os-security-groups:get": READ,
    "os_compute_api:os-tenant-networks:list": READ,
    "os_compute_api:os-server-password:show": READ,
    "os_compute_api:os-server-password:clear": WRITE,
    "os_compute_api:os-tenant-networks:show": READ,
    "os_compute_api:os-security-groups:show": READ,
    "os_compute_api:os-security-groups:create": WRITE,
    "os_compute_api:os-security-groups:update": WRITE,
    "os_compute_api:os-security-groups:delete": WRITE,
    "os_compute_api:os-security-groups:rule:create": WRITE,
    "os_compute_api:os-security-groups:rule:delete": WRITE,
    "os_compute_api:os-server-external-events:create": SERVICE,
    "os_compute_api:os-migrate-server:migrate_live": ADMIN,
    "os_compute_api:os-migrate-server:migrate": ADMIN,
    "os_compute_api:os-admin-actions:reset_state": ADMIN,
    "os_compute_api:os-admin-actions:inject_network_info": ADMIN,
    "os_compute_api:os-lock-server:lock": WRITE,
    "os_compute_api:os-lock-server:unlock": WRITE,
    "os_compute_api:os-lock-server:unlock:unlock_override": ADMIN,
    "os_compute_api:os-deferred-delete:restore": WRITE,
    "os_compute_api:os-deferred-delete:force": WRITE,
    "os_compute_api:os-create-backup": WRITE,
    "os_compute_api:os-server-diagnostics": ADMIN,
    "os_compute_api:os-server-tags:index": READ,
    "os_compute_api:os-server-tags:show": READ,
    "os_compute_api:os-server-tags:update": WRITE,
    "os_compute_api:os-server-tags:update_all": WRITE,
    "os_compute_api:os-server-tags:delete": WRITE,
    "os_compute_api:os-server-tags:delete_all": WRITE,
    "os_compute_api:os-flavor-access": ADMIN,
    "os_compute_api:os-flavor-access:add_tenant_access": ADMIN,
    "os_compute_api:os-flavor-access:remove_tenant_access": ADMIN,
    "os_compute_api:os-flavor-manage:create": ADMIN,
    "os_compute_api:os-flavor-manage:update": ADMIN,
    "os_compute_api:os-flavor-manage:delete": ADMIN,
    "os_compute_api:os-flavor-extra-specs:index": READ,
    "os_compute_api:os-flavor-extra-specs:show": READ,
    "os_compute_api:os-flavor-extra-specs:create": ADMIN,
    "os_compute_api:os-flavor-extra-specs:update": ADMIN,
    "os_compute_api:os-flavor-extra-specs:delete": ADMIN,
    "os_compute_api:os-keypairs:index": KEY_OWNER,
    "os_compute_api:os-keypairs:create": KEY_OWNER,
    "os_compute_api:os-keypairs:delete": KEY_OWNER,
    "os_compute_api:os-keypairs:show": KEY_OWNER,
    "os_compute_api:limits": ANYONE,
    "os_compute_api:limits:other_project": ADMIN,
    "os_compute_api:os-quota-class-sets:show": ADMIN,
    "os_compute_api:os-quota-class-sets:update": ADMIN,
    "os_compute_api:os-quota-sets:update": ADMIN,
    "os_compute_api:os-quota-sets:defaults": ANYONE,
    "os_compute_api:os-quota-sets:show": READ,
    "os_compute_api:os-quota-sets:delete": ADMIN,
    "os_compute_api:os-quota-sets:detail": READ,
}

# The callers the defaults are tried with, on a target of project p1 and user u1.
CALLERS = {
    "reader": caller("reader"),
    "member": caller("member", "reader"),
    "member, another user": caller("member", "reader", user="u3"),
    "member of another project": caller("member", "reader", project="p2", user="u2"),
    "admin of another project": caller("admin", "member", "reader", project="p9",
                                       user="root"),
    "service": caller("service", project="service", user="nova"),
}
ALLOWED = {
    READ: {"reader", "member", "member, another user", "admin of another project"},
    WRITE: {"member", "member, another user", "admin of another project"},
    ADMIN: {"admin of another project"},
    ANYONE: set(CALLERS),
    KEY_OWNER: {"reader", "member", "admin of another project"},
    SERVICE: {"service", "admin of another project"},  # Nova's rule:service_or_admin
}


def test_every_rule_registered_has_its_default_written_here():
    base = {name for name, _ in policy.BASE}
    assert set(RULES.enforcer.registered_rules) - base == set(DEFAULTS)


@pytest.mark.parametrize("rule", sorted(DEFAULTS))
def test_each_rule_lets_act_whom_its_default_names(rule):
    target = {"project_id": "p1", "user_id": "u1"}
    allowed = {name for name, who in CALLERS.items() if RULES.allows(who, rule, target)}
    assert allowed == ALLOWED[DEFAULTS[rule]], DEFAULTS[rule]


# --- through the handlers -------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """A request that meets a rule: path under /v2.1 and body with the world's {server},
    {group}, {aggregate}, {hypervisor}, {action} and {user} (the keys' user) in them."""

    method: str
    path: str
    body: Any = None
    version: str | None = None
    # What another project's member meets naming the thing (None: nothing of another's).
    owner: str | None = None
    # The rule the request meets first, when this one is asked only after it.
    after: str | None = None
    # Asked of a cloud on the neutron backend (a fake Neutron: p1's network {network}).
    neutron: bool = False


SERVER_ACTION = "/servers/{server}/action"
# Nova's answers to another project's member: its servers are not found (Nova's instance
# lookup is the project's); its groups neither (the group lookup is too); a server's tags
# are refused by the rule (Nova finds the server's cell mapping, of any project, first);
# a key named by its user, a project named by its id, are refused by the rule.
SERVER, TAGS, GROUP, BY_RULE = "server", "tags", "group", "the rule"

CALLS = {
    SERVERS + "index": Call("GET", "/servers"),
    SERVERS + "detail": Call("GET", "/servers/detail"),
    SERVERS + "index:get_all_tenants": Call("GET", "/servers?all_tenants=1"),
    SERVERS + "detail:get_all_tenants": Call("GET", "/servers/detail?all_tenants=1"),
    SERVERS + "show": Call("GET", "/servers/{server}", owner=SERVER),
    SERVERS + "create": Call("POST", "/servers", {"server": {
        "name": "new", "flavorRef": "1", "imageRef": "file:///dev/null"}}),
    SERVERS + "create:forced_host": Call("POST", "/servers", {"server": {
        "name": "new", "flavorRef": "1", "imageRef": "file:///dev/null",
        "availability_zone": "nova:hv1"}}),
    "compute:servers:create:requested_destination": Call("POST", "/servers", {"server": {
        "name": "new", "flavorRef": "1", "imageRef": "file:///dev/null", "host": "hv1",
        "networks": "auto"}},
        version="2.74"),
    SERVERS + "create:attach_network": Call("POST", "/servers", {"server": {
        "name": "new", "flavorRef": "1", "imageRef": "file:///dev/null",
        "networks": [{"uuid": "{network}"}]}}, neutron=True, after=SERVERS + "create"),
    SERVERS + "create:zero_disk_flavor": Call("POST", "/servers", {"server": {
        "name": "new", "flavorRef": "0", "imageRef": "file:///dev/null"}}),
    SERVERS + "delete": Call("DELETE", "/servers/{server}", owner=SERVER),
    SERVERS + "update": Call("PUT", "/servers/{server}", {"server": {"name": "renamed"}},
                             owner=SERVER),
    SERVERS + "confirm_resize": Call("POST", SERVER_ACTION, {"confirmResize": None},
                                     owner=SERVER),
    SERVERS + "revert_resize": Call("POST", SERVER_ACTION, {"revertResize": None},
                                    owner=SERVER),
    SERVERS + "reboot": Call("POST", SERVER_ACTION, {"reboot": {"type": "HARD"}},
                             owner=SERVER),
    SERVERS + "resize": Call("POST", SERVER_ACTION, {"resize": {"flavorRef": "2"}},
                             owner=SERVER),
    SERVERS + "rebuild": Call("POST", SERVER_ACTION, {"rebuild": {
        "imageRef": "file:///dev/null"}}, owner=SERVER),
    SERVERS + "rebuild:trusted_certs": Call("POST", SERVER_ACTION, {"rebuild": {
        "imageRef": "file:///dev/null", "trusted_image_certificates": ["0" * 40]}},
        version="2.63", owner=SERVER, after=SERVERS + "rebuild"),
    SERVERS + "create_image": Call("POST", SERVER_ACTION, {"createImage": {"name": "snap"}},
                                   owner=SERVER),
    SERVERS + "start": Call("POST", SERVER_ACTION, {"os-start": None}, owner=SERVER),
    SERVERS + "stop": Call("POST", SERVER_ACTION, {"os-stop": None}, owner=SERVER),
    "os_compute_api:os-suspend-server:suspend": Call("POST", SERVER_ACTION, {"suspend": None},
                                                     owner=SERVER),
    "os_compute_api:os-suspend-server:resume": Call("POST", SERVER_ACTION, {"resume": None},
                                                    owner=SERVER),
    "os_compute_api:os-pause-server:pause": Call("POST", SERVER_ACTION, {"pause": None},
                                                 owner=SERVER),
    "os_compute_api:os-pause-server:unpause": Call("POST", SERVER_ACTION, {"unpause": None},
                                                   owner=SERVER),
    "os_compute_api:os-console-output": Call("POST", SERVER_ACTION, {
        "os-getConsoleOutput": {"length": 10}}, owner=SERVER),
    "os_compute_api:os-remote-consoles": Call("POST", "/servers/{server}/remote-consoles", {
        "remote_console": {"protocol": "vnc", "type": "novnc"}}, version="2.6",
        owner=SERVER),
    "os_compute_api:server-metadata:index": Call("GET", "/servers/{server}/metadata",
                                                 owner=SERVER),
    "os_compute_api:server-metadata:show": Call("GET", "/servers/{server}/metadata/k",
                                                owner=SERVER),
    "os_compute_api:server-metadata:create": Call("POST", "/servers/{server}/metadata", {
        "metadata": {"k2": "v"}}, owner=SERVER),
    "os_compute_api:server-metadata:update_all": Call("PUT", "/servers/{server}/metadata", {
        "metadata": {"k2": "v"}}, owner=SERVER),
    "os_compute_api:server-metadata:update": Call("PUT", "/servers/{server}/metadata/k", {
        "meta": {"k": "w"}}, owner=SERVER),
    "os_compute_api:server-metadata:delete": Call("DELETE", "/servers/{server}/metadata/k",
                                                  owner=SERVER),
    "os_compute_api:ips:index": Call("GET", "/servers/{server}/ips", owner=SERVER),
    "os_compute_api:ips:show": Call("GET", "/servers/{server}/ips/private", owner=SERVER),
    "os_compute_api:os-volumes-attachments:index": Call(
        "GET", "/servers/{server}/os-volume_attachments", owner=SERVER),
    "os_compute_api:os-volumes-attachments:show": Call(
        "GET", "/servers/{server}/os-volume_attachments/00000000-0000-4000-8000-000000000007",
        owner=SERVER),
    "os_compute_api:os-instance-actions:list": Call(
        "GET", "/servers/{server}/os-instance-actions", owner=SERVER),
    "os_compute_api:os-instance-actions:show": Call(
        "GET", "/servers/{server}/os-instance-actions/{action}", owner=SERVER),
    "os_compute_api:os-server-groups:create": Call("POST", "/os-server-groups", {
        "server_group": {"name": "g2", "policies": ["affinity"]}}),
    "os_compute_api:os-server-groups:delete": Call("DELETE", "/os-server-groups/{group}",
                                                   owner=GROUP),
    "os_compute_api:os-server-groups:index": Call("GET", "/os-server-groups"),
    "os_compute_api:os-server-groups:index:all_projects": Call(
        "GET", "/os-server-groups?all_projects=1"),
    "os_compute_api:os-server-groups:show": Call("GET", "/os-server-groups/{group}",
                                                 owner=GROUP),
    "os_compute_api:os-availability-zone:list": Call("GET", "/os-availability-zone"),
    "os_compute_api:os-availability-zone:detail": Call("GET", "/os-availability-zone/detail"),
    "os_compute_api:os-services:list": Call("GET", "/os-services"),
    "os_compute_api:os-services:update": Call("PUT", "/os-services/{hypervisor}", {
        "status": "disabled"}, version="2.53"),
    "os_compute_api:os-services:delete": Call("DELETE", "/os-services/{hypervisor}",
                                              version="2.53"),
    "os_compute_api:extensions": Call("GET", "/extensions"),
    "os_compute_api:os-networks:list": Call("GET", "/os-networks"),
    "os_compute_api:os-networks:view": Call("GET", "/os-networks/private"),
    "os_compute_api:os-hosts:list": Call("GET", "/os-hosts"),
    "os_compute_api:os-hosts:show": Call("GET", "/os-hosts/hv1"),
    "os_compute_api:os-hosts:update": Call("PUT", "/os-hosts/hv1", {"status": "disable"}),
    "os_compute_api:os-hosts:reboot": Call("GET", "/os-hosts/hv1/reboot"),
    "os_compute_api:os-hosts:shutdown": Call("GET", "/os-hosts/hv1/shutdown"),
    "os_compute_api:os-hosts:start": Call("GET", "/os-hosts/hv1/startup"),
    "os_compute_api:os-hypervisors:list": Call("GET", "/os-hypervisors"),
    "os_compute_api:os-hypervisors:list-detail": Call("GET", "/os-hypervisors/detail"),
    "os_compute_api:os-hypervisors:statistics": Call("GET", "/os-hypervisors/statistics"),
    "os_compute_api:os-hypervisors:show": Call("GET", "/os-hypervisors/{hypervisor}",
                                               version="2.53"),
    "os_compute_api:os-hypervisors:uptime": Call("GET", "/os-hypervisors/{hypervisor}/uptime",
                                                 version="2.53"),
    "os_compute_api:os-hypervisors:search": Call("GET", "/os-hypervisors/hv1/search"),
    "os_compute_api:os-hypervisors:servers": Call("GET", "/os-hypervisors/hv1/servers"),
    "os_compute_api:os-aggregates:index": Call("GET", "/os-aggregates"),
    "os_compute_api:os-aggregates:create": Call("POST", "/os-aggregates", {
        "aggregate": {"name": "agg2"}}),
    "os_compute_api:os-aggregates:show": Call("GET", "/os-aggregates/{aggregate}"),
    "os_compute_api:os-aggregates:update": Call("PUT", "/os-aggregates/{aggregate}", {
        "aggregate": {"name": "agg3"}}),
    "os_compute_api:os-aggregates:delete": Call("DELETE", "/os-aggregates/{aggregate}"),
    "os_compute_api:os-aggregates:add_host": Call("POST", "/os-aggregates/{aggregate}/action",
                                                  {"add_host": {"host": "hv1"}}),
    "os_compute_api:os-aggregates:remove_host": Call(
        "POST", "/os-aggregates/{aggregate}/action", {"remove_host": {"host": "hv1"}}),
    "os_compute_api:os-aggregates:set_metadata": Call(
        "POST", "/os-aggregates/{aggregate}/action", {"set_metadata": {"metadata": {
            "k": "v"}}}),
    "os_compute_api:os-simple-tenant-usage:list": Call("GET", "/os-simple-tenant-usage"),
    "os_compute_api:os-simple-tenant-usage:show": Call("GET", "/os-simple-tenant-usage/p1",
                                                       owner=BY_RULE),
    "os_compute_api:os-instance-usage-audit-log:list": Call(
        "GET", "/os-instance_usage_audit_log"),
    "os_compute_api:os-instance-usage-audit-log:show": Call(
        "GET", "/os-instance_usage_audit_log/2026-01-01%2000:00:00"),
    "os_compute_api:os-migrations:index": Call("GET", "/os-migrations"),
    "os_compute_api:os-security-groups:list": Call(
        "GET", "/servers/{server}/os-security-groups", owner=SERVER, neutron=True),
    "os_compute_api:os-attach-interfaces:list": Call(
        "GET", "/servers/{server}/os-interface", owner=SERVER, neutron=True),
    "os_compute_api:os-attach-interfaces:show": Call(
        "GET", "/servers/{server}/os-interface/{network}", owner=SERVER, neutron=True),
    "os_compute_api:os-attach-interfaces:create": Call(
        "POST", "/servers/{server}/os-interface", {"interfaceAttachment": {}},
        owner=SERVER, neutron=True),
    "os_compute_api:os-attach-interfaces:delete": Call(
        "DELETE", "/servers/{server}/os-interface/{network}", owner=SERVER, neutron=True),
    "os_compute_api:os-security-groups:add": Call("POST", SERVER_ACTION, {
        "addSecurityGroup": {"name": "default"}}, owner=SERVER),
    "os_compute_api:os-security-groups:remove": Call("POST", SERVER_ACTION, {
        "removeSecurityGroup": {"name": "default"}}, owner=SERVER),
    "os_compute_api:os-server-password:show": Call(
        "GET", "/servers/{server}/os-server-password", owner=SERVER),
    "os_compute_api:os-server-password:clear": Call(
        "DELETE", "/servers/{server}/os-server-password", owner=SERVER),
    "os_compute_api:os-tenant-networks:list": Call("GET", "/os-tenant-networks",
                                                   neutron=True),
    "os_compute_api:os-tenant-networks:show": Call("GET", "/os-tenant-networks/{network}",
                                                   neutron=True),
    "os_compute_api:os-security-groups:get": Call("GET", "/os-security-groups",
                                                  neutron=True),
    "os_compute_api:os-security-groups:show": Call("GET", "/os-security-groups/{network}",
                                                   neutron=True),
    "os_compute_api:os-security-groups:create": Call("POST", "/os-security-groups", {
        "security_group": {"name": "web", "description": "ssh"}}, neutron=True),
    "os_compute_api:os-security-groups:update": Call("PUT", "/os-security-groups/{network}", {
        "security_group": {"name": "web", "description": "ssh"}}, neutron=True),
    "os_compute_api:os-security-groups:delete": Call(
        "DELETE", "/os-security-groups/{network}", neutron=True),
    "os_compute_api:os-security-groups:rule:create": Call(
        "POST", "/os-security-group-rules", {"security_group_rule": {
            "parent_group_id": "{network}", "ip_protocol": "tcp", "from_port": 22,
            "to_port": 22}}, neutron=True),
    "os_compute_api:os-security-groups:rule:delete": Call(
        "DELETE", "/os-security-group-rules/{network}", neutron=True),
    "os_compute_api:os-server-external-events:create": Call(
        "POST", "/os-server-external-events", {"events": [
            {"name": "network-changed", "server_uuid": "{server}"}]}),
    "os_compute_api:os-migrate-server:migrate_live": Call("POST", SERVER_ACTION, {
        "os-migrateLive": {"host": None, "block_migration": "auto"}}, version="2.25",
        owner=SERVER),
    "os_compute_api:os-migrate-server:migrate": Call("POST", SERVER_ACTION, {"migrate": None},
                                                     owner=SERVER),
    "os_compute_api:os-admin-actions:inject_network_info": Call(
        "POST", SERVER_ACTION, {"injectNetworkInfo": None}, owner=SERVER),
    "os_compute_api:os-admin-actions:reset_state": Call("POST", SERVER_ACTION, {
        "os-resetState": {"state": "error"}}, owner=SERVER),
    "os_compute_api:os-lock-server:lock": Call("POST", SERVER_ACTION, {"lock": None},
                                               owner=SERVER),
    "os_compute_api:os-lock-server:unlock": Call("POST", SERVER_ACTION, {"unlock": None},
                                                 owner=SERVER),
    # Asked of who unlocks a server locked by the other side (an admin, its owner): the
    # server is locked so first (World.ask).
    "os_compute_api:os-lock-server:unlock:unlock_override": Call(
        "POST", SERVER_ACTION + "?locked", {"unlock": None}, owner=SERVER),
    "os_compute_api:os-deferred-delete:restore": Call("POST", SERVER_ACTION, {"restore": None},
                                                      owner=SERVER),
    "os_compute_api:os-deferred-delete:force": Call("POST", SERVER_ACTION, {
        "forceDelete": None}, owner=SERVER),
    "os_compute_api:os-create-backup": Call("POST", SERVER_ACTION, {"createBackup": {
        "name": "b", "backup_type": "daily", "rotation": 1}}, owner=SERVER),
    "os_compute_api:os-server-diagnostics": Call("GET", "/servers/{server}/diagnostics",
                                                 owner=SERVER),
    "os_compute_api:os-server-tags:index": Call("GET", "/servers/{server}/tags",
                                                version="2.26", owner=TAGS),
    "os_compute_api:os-server-tags:show": Call("GET", "/servers/{server}/tags/t",
                                               version="2.26", owner=TAGS),
    "os_compute_api:os-server-tags:update": Call("PUT", "/servers/{server}/tags/u",
                                                 version="2.26", owner=TAGS),
    "os_compute_api:os-server-tags:update_all": Call("PUT", "/servers/{server}/tags", {
        "tags": ["u"]}, version="2.26", owner=TAGS),
    "os_compute_api:os-server-tags:delete": Call("DELETE", "/servers/{server}/tags/t",
                                                 version="2.26", owner=TAGS),
    "os_compute_api:os-server-tags:delete_all": Call("DELETE", "/servers/{server}/tags",
                                                     version="2.26", owner=TAGS),
    "os_compute_api:os-flavor-access": Call("GET", "/flavors/p/os-flavor-access"),
    "os_compute_api:os-flavor-access:add_tenant_access": Call("POST", "/flavors/p/action", {
        "addTenantAccess": {"tenant": "p3"}}),
    "os_compute_api:os-flavor-access:remove_tenant_access": Call(
        "POST", "/flavors/p/action", {"removeTenantAccess": {"tenant": "p1"}}),
    "os_compute_api:os-flavor-manage:create": Call("POST", "/flavors", {"flavor": {
        "name": "m1.new", "ram": 256, "vcpus": 1, "disk": 1}}),
    "os_compute_api:os-flavor-manage:update": Call("PUT", "/flavors/1", {"flavor": {
        "description": "tiny"}}, version="2.55"),
    "os_compute_api:os-flavor-manage:delete": Call("DELETE", "/flavors/2"),
    "os_compute_api:os-flavor-extra-specs:index": Call("GET", "/flavors/1/os-extra_specs"),
    "os_compute_api:os-flavor-extra-specs:show": Call(
        "GET", "/flavors/1/os-extra_specs/hw:numa_nodes"),
    "os_compute_api:os-flavor-extra-specs:create": Call("POST", "/flavors/1/os-extra_specs", {
        "extra_specs": {"hw:cpu_policy": "shared"}}),
    "os_compute_api:os-flavor-extra-specs:update": Call(
        "PUT", "/flavors/1/os-extra_specs/hw:numa_nodes", {"hw:numa_nodes": "2"}),
    "os_compute_api:os-flavor-extra-specs:delete": Call(
        "DELETE", "/flavors/1/os-extra_specs/hw:numa_nodes"),
    "os_compute_api:os-keypairs:index": Call("GET", "/os-keypairs?user_id={user}",
                                             version="2.10", owner=BY_RULE),
    "os_compute_api:os-keypairs:create": Call("POST", "/os-keypairs", {"keypair": {
        "name": "k2", "public_key": SSH_KEY, "user_id": "{user}"}}, version="2.10",
        owner=BY_RULE),
    "os_compute_api:os-keypairs:delete": Call("DELETE", "/os-keypairs/k?user_id={user}",
                                              version="2.10", owner=BY_RULE),
    "os_compute_api:os-keypairs:show": Call("GET", "/os-keypairs/k?user_id={user}",
                                            version="2.10", owner=BY_RULE),
    "os_compute_api:limits": Call("GET", "/limits"),
    "os_compute_api:limits:other_project": Call("GET", "/limits?tenant_id=p2"),
    "os_compute_api:os-quota-class-sets:show": Call("GET", "/os-quota-class-sets/default"),
    "os_compute_api:os-quota-class-sets:update": Call("PUT", "/os-quota-class-sets/default", {
        "quota_class_set": {"cores": 40}}),
    "os_compute_api:os-quota-sets:update": Call("PUT", "/os-quota-sets/p1", {
        "quota_set": {"cores": 40}}),
    "os_compute_api:os-quota-sets:defaults": Call("GET", "/os-quota-sets/p1/defaults"),
    "os_compute_api:os-quota-sets:show": Call("GET", "/os-quota-sets/p1", owner=BY_RULE),
    "os_compute_api:os-quota-sets:delete": Call("DELETE", "/os-quota-sets/p1"),
    "os_compute_api:os-quota-sets:detail": Call("GET", "/os-quota-sets/p1/detail",
                                                owner=BY_RULE),
}

# Rules that shape an answer rather than refuse it: the request, and what the caller the
# rule lets sees that one it refuses does not.
VIEWS: dict[str, tuple[Call, Callable[[Any], Any]]] = {
    SERVERS + "allow_all_filters": (
        Call("GET", "/servers?all_tenants=1&host=elsewhere"),
        lambda body: body["servers"] == []),  # refused, the filter is dropped
    SERVERS + "show:flavor-extra-specs": (
        Call("GET", "/servers/{server}", version="2.47"),
        lambda body: "extra_specs" in body["server"]["flavor"]),
    SERVERS + "show:host_status": (
        Call("GET", "/servers/{server}", version="2.16"),
        lambda body: "host_status" in body["server"]),
    "os_compute_api:os-extended-server-attributes": (
        Call("GET", "/servers/{server}"),
        lambda body: "OS-EXT-SRV-ATTR:host" in body["server"]),
    "os_compute_api:os-instance-actions:events": (
        Call("GET", "/servers/{server}/os-instance-actions/{action}"),
        lambda body: "events" in body["instanceAction"]),
    "os_compute_api:os-instance-actions:events:details": (
        Call("GET", "/servers/{server}/os-instance-actions/{action}", version="2.84"),
        lambda body: "details" in body["instanceAction"]["events"][0]),
}

# Rules whose refusal is an answer of its own, not the rule's 403 (Nova asks them with
# fatal=False), with the request that meets each and the refusal's test.
OWN_ANSWER: dict[str, tuple[Call, Callable[[Any], bool]]] = {
    "network:attach_external_network": (
        Call("POST", "/servers", {"server": {
            "name": "new", "flavorRef": "1", "imageRef": "file:///dev/null",
            "networks": [{"uuid": "{external}"}]}}, neutron=True),
        lambda answer: answer.status_int == 403 and answer.json["forbidden"]["message"]
        .startswith("It is not allowed to create an interface on external network ")),
}

# Rules registered (so a policy file may name them) that no request here asks, and why.
UNCHECKED = {
    SERVERS + "create_image:allow_volume_backed": "no server is volume-backed (no volume "
                                                  "service)",
    SERVERS + "show:host_status:unknown-only": "host_status is shown whole to whom "
                                               "show:host_status lets, else not at all",
}

# Rules whose default refuses no one through the handlers, and why.
NOT_REFUSED_BY_DEFAULT = {
    # Nova's: a non-admin's all_projects is not refused, it lists the caller's own.
    "os_compute_api:os-server-groups:index:all_projects": "asked of admins only",
}

# Whom each default lets, and one it refuses, through the API (the world is p1's, u1's).
AS = {
    "reader": {"roles": ("reader",)},
    "member": {"roles": MEMBER},
    "no role": {"roles": ("observer",)},
    "admin": {"roles": ADMIN_ROLES, "project": "admin", "user": "root"},
    "service": {"roles": ("service",), "project": "service", "user": "nova"},
    "member of another project": {"roles": MEMBER, "project": "p2", "user": "u2"},
}
LET = {READ: "reader", WRITE: "member", ADMIN: "admin", ANYONE: "no role",
       KEY_OWNER: "member", SERVICE: "service"}
REFUSED = {READ: "no role", WRITE: "reader", ADMIN: "member", SERVICE: "member",
           KEY_OWNER: "member"}  # naming another user's keys (2.10)


@dataclass
class World:
    harness: Harness
    names: dict[str, str] = field(default_factory=dict)

    def ask(self, call: Call, who: str, user: str = "u1") -> webob.Response:
        """`call` as `who`, naming `user`'s keys."""
        self.prepare(call, who)
        return self.send(call, who, user)

    def prepare(self, call: Call, who: str) -> None:
        if call.path.endswith("?locked"):  # by the other side: the caller meets the override
            locker = "member" if who == "admin" else "admin"
            path = "/v2.1" + call.path.format(**self.names).removesuffix("?locked")
            assert self.harness.call("POST", path, {"lock": None},
                                     **AS[locker]).status_int == 202

    def send(self, call: Call, who: str, user: str = "u1") -> webob.Response:
        names = {**self.names, "user": user}
        path = call.path.format(**names).removesuffix("?locked")
        text = json.dumps(call.body)
        for name, value in names.items():
            text = text.replace("{" + name + "}", value)
        body = None if call.body is None else json.loads(text)
        return self.harness.call(call.method, "/v2.1" + path, body, version=call.version,
                                 **AS[who])


def world(neutron: bool = False) -> World:
    """p1's ACTIVE server (with metadata k, tag t), u1's key k, p1's group, an aggregate,
    flavors 1 (an extra spec), 2, 0 (no disk) and p (private, open to p1): all refused
    requests must meet something to refuse. `neutron`: on the neutron backend, p1's
    network {network} in a fake Neutron."""
    fake = FakeNeutron() if neutron else None
    network = fake.add_network("p1")["id"] if fake else ""
    external = fake.add_network("ops", external=True)["id"] if fake else ""
    harness = Harness.new(neutron=fake)
    harness.backend.policy = RULES
    hypervisor = harness.add_host("hv1")
    harness.add_flavor("1", extra_specs={"hw:numa_nodes": "1"})
    harness.add_flavor("2", "m1.small", 2, 512, 2)
    harness.add_flavor("0", "m1.nodisk", 1, 256, 0)
    harness.add_flavor("p", "m1.private", 1, 256, 1, is_public=False, projects=["p1"])
    server = active(harness)
    for method, path, body, version in (
            ("POST", f"/servers/{server}/metadata", {"metadata": {"k": "v"}}, None),
            ("PUT", f"/servers/{server}/tags/t", None, "2.26"),
            ("POST", "/os-keypairs", {"keypair": {"name": "k", "public_key": SSH_KEY}},
             None)):
        assert harness.call(method, "/v2.1" + path, body, version=version).status_int < 300
    group = harness.call("POST", "/v2.1/os-server-groups", {"server_group": {
        "name": "g", "policies": ["affinity"]}}).json["server_group"]["id"]
    aggregate = harness.admin("POST", "/v2.1/os-aggregates", {
        "aggregate": {"name": "agg"}}).json["aggregate"]["id"]
    action = harness.call("GET", f"/v2.1/servers/{server}/os-instance-actions").json[
        "instanceActions"][0]["request_id"]
    return World(harness, {"server": server, "group": group, "aggregate": str(aggregate),
                           "hypervisor": hypervisor, "action": action, "network": network,
                           "external": external})


@contextlib.contextmanager
def refusing(rule: str) -> Iterator[None]:
    """`rule` refusing everyone ("!") for the while (as a policy file would have it)."""
    saved = RULES.enforcer.rules[rule]
    RULES.enforcer.rules[rule] = oslo_policy.Rules.from_dict({rule: "!"})[rule]
    try:
        yield
    finally:
        RULES.enforcer.rules[rule] = saved


def written(there: World) -> tuple[int, dict[str, Any]]:
    """What a write would move: etcd's revision, Placement's claims."""
    return there.harness.store.revision, dict(there.harness.placement.consumers)


def refusal(rule: str) -> dict[str, Any]:
    return {"forbidden": {"code": 403,
                          "message": f"Policy doesn't allow {rule} to be performed."}}


def test_every_rule_is_met_by_a_request_or_shapes_a_view_or_is_said_unchecked():
    assert not set(CALLS) & set(UNCHECKED) and not set(VIEWS) & set(UNCHECKED)
    assert not set(OWN_ANSWER) & (set(CALLS) | set(VIEWS) | set(UNCHECKED))
    assert set(CALLS) | set(VIEWS) | set(OWN_ANSWER) | set(UNCHECKED) == set(DEFAULTS)


@pytest.mark.parametrize("rule", sorted(OWN_ANSWER))
def test_a_rule_with_an_answer_of_its_own_gives_it(rule):
    """Whom the default lets passes; whom it refuses, and anyone while it refuses everyone,
    meets the rule's own answer, and nothing is written."""
    call, refused = OWN_ANSWER[rule]
    kind = DEFAULTS[rule]
    answer = world(call.neutron).ask(call, LET[kind])
    assert answer.status_int < 300 and not refused(answer), answer.text
    for who, refusing_all in ((REFUSED[kind], False), (LET[kind], True)):
        there = world(call.neutron)
        before = written(there)
        with refusing(rule) if refusing_all else contextlib.nullcontext():
            answer = there.ask(call, who)
        assert refused(answer), answer.text
        assert written(there) == before


@pytest.mark.parametrize("rule", sorted(CALLS))
def test_the_request_meets_its_rule(rule):
    """Whom the default lets is not refused; with the rule refusing everyone, the same
    request is refused by it (so it is this rule the handler asks, of this request)."""
    call, who = CALLS[rule], LET[DEFAULTS[rule]]
    answer = world(call.neutron).ask(call, who)
    assert answer.status_int != 403, answer.text
    there = world(call.neutron)
    with refusing(rule):
        answer = there.ask(call, who)
    assert (answer.status_int, answer.json) == (403, refusal(rule))


@pytest.mark.parametrize("rule", sorted(rule for rule in CALLS if DEFAULTS[rule] != ANYONE
                                        and rule not in NOT_REFUSED_BY_DEFAULT))
def test_whom_the_default_refuses_is_refused_and_nothing_changes(rule):
    """A reader on a write, a member on an admin's rule, a caller without the reader role
    on a read, an admin on the service's, a member naming another user's keys: 403 by the
    rule (or the one the request meets first)."""
    call, kind = CALLS[rule], DEFAULTS[rule]
    there = world(call.neutron)
    there.prepare(call, REFUSED[kind])
    before = written(there)
    answer = there.send(call, REFUSED[kind], user="u2" if kind == KEY_OWNER else "u1")
    assert (answer.status_int, answer.json) == (403, refusal(call.after or rule))
    assert written(there) == before


@pytest.mark.parametrize("rule", sorted(rule for rule in CALLS if CALLS[rule].owner))
def test_another_projects_member_meets_novas_answer(rule):
    call = CALLS[rule]
    there = world(call.neutron)
    answer = there.ask(call, "member of another project")
    server, group = there.names["server"], there.names["group"]
    expected = {
        SERVER: (404, {"itemNotFound": {"code": 404,
                                        "message": f"Instance {server} could not be found."}}),
        GROUP: (404, {"itemNotFound": {
            "code": 404, "message": f"Instance group {group} could not be found."}}),
        TAGS: (403, refusal(rule)),
        BY_RULE: (403, refusal(rule)),
    }[call.owner]
    assert (answer.status_int, answer.json) == expected


@pytest.mark.parametrize("rule", sorted(VIEWS))
def test_a_view_rule_shapes_what_its_caller_sees(rule):
    call, shows = VIEWS[rule]
    who = LET[DEFAULTS[rule]]
    answer = world().ask(call, who)
    assert answer.status_int == 200 and shows(answer.json), answer.text
    there = world()
    with refusing(rule):
        answer = there.ask(call, who)
    assert answer.status_int == 200 and not shows(answer.json), answer.text


@pytest.mark.parametrize("rule", sorted(UNCHECKED))
def test_a_rule_said_unchecked_is_asked_nowhere(rule):
    suffix = rule.rsplit(":", 1)[-1]
    asking = [path for path in (REPO / "etcd_compute").rglob("*.py")
              if suffix in path.read_text() and path.name != "policy.py"]
    assert asking == []
