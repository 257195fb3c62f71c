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
