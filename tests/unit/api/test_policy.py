"""Nova's rules and defaults: readers read, members write their project's, admins all;
keypairs are their user's; a policy file overrides; a bad one is a config error."""

from __future__ import annotations

from pathlib import Path

import pytest
from oslo_context import context as oslo_context

from etcd_compute.api import policy
from etcd_compute.api.context import Context
from etcd_compute.api.policy import Policy, PolicyNotAuthorized
from etcd_compute.errors import ConfigError


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
    "the key's user", "the service role")
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
    "os_compute_api:os-console-output": WRITE,
    "os_compute_api:server-metadata:index": READ,
    "os_compute_api:server-metadata:show": READ,
    "os_compute_api:server-metadata:create": WRITE,
    "os_compute_api:server-metadata:update_all": WRITE,
    "os_compute_api:server-metadata:update": WRITE,
    "os_compute_api:server-metadata:delete": WRITE,
    "os_compute_api:ips:index": READ,
    "os_compute_api:ips:show": READ,
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
    "os_compute_api:os-security-groups:add": WRITE,
    "os_compute_api:os-security-groups:remove": WRITE,
    "os_compute_api:os-server-external-events:create": SERVICE,
    "os_compute_api:os-migrate-server:migrate_live": ADMIN,
    "os_compute_api:os-migrate-server:migrate": ADMIN,
    "os_compute_api:os-admin-actions:reset_state": ADMIN,
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
    SERVICE: {"service"},
}


def test_every_rule_registered_has_its_default_written_here():
    base = {name for name, _ in policy.BASE}
    assert set(RULES.enforcer.registered_rules) - base == set(DEFAULTS)


@pytest.mark.parametrize("rule", sorted(DEFAULTS))
def test_each_rule_lets_act_whom_its_default_names(rule):
    target = {"project_id": "p1", "user_id": "u1"}
    allowed = {name for name, who in CALLERS.items() if RULES.allows(who, rule, target)}
    assert allowed == ALLOWED[DEFAULTS[rule]], DEFAULTS[rule]
