"""Who may do what: Nova's policy rules, with Nova's names and defaults (oslo.policy).

The base rules are Nova's (`nova/policies/base.py`): a project's `reader` reads, its
`member` writes, `admin` may do everything. Each call checks its own rule (named as in
Nova, `os_compute_api:servers:create`...) against the target it acts on (the server's
project, the keypair's user). A YAML policy file (`api.policy_file`) overrides any rule,
as Nova's does. New defaults and scope checks are enforced (tokens must be
project-scoped).
"""

from __future__ import annotations

import os
from typing import Any

from oslo_config import cfg
from oslo_policy import opts as policy_opts
from oslo_policy import policy

from etcd_compute.api.context import Context
from etcd_compute.errors import ConfigError

ADMIN = "rule:context_is_admin"
PROJECT_READER_OR_ADMIN = "rule:project_reader_or_admin"
PROJECT_MEMBER_OR_ADMIN = "rule:project_member_or_admin"
ANY = "@"
SERVERS = "os_compute_api:servers:%s"
FLAVOR_MANAGE = "os_compute_api:os-flavor-manage:%s"
EXTRA_SPECS = "os_compute_api:os-flavor-extra-specs:%s"
FLAVOR_ACCESS = "os_compute_api:os-flavor-access"
KEYPAIRS = "os_compute_api:os-keypairs:%s"
QUOTA_SETS = "os_compute_api:os-quota-sets:%s"
QUOTA_CLASS_SETS = "os_compute_api:os-quota-class-sets:%s"
LIMITS = "os_compute_api:limits"
LIMITS_OTHER_PROJECT = "os_compute_api:limits:other_project"
EXTENDED_ATTRIBUTES = "os_compute_api:os-extended-server-attributes"
SERVER_TAGS = "os_compute_api:os-server-tags:%s"
KEYPAIR_OWNER = "(" + ADMIN + ") or user_id:%(user_id)s"
CONSOLE_OUTPUT = "os_compute_api:os-console-output"
REMOTE_CONSOLES = "os_compute_api:os-remote-consoles"
SERVER_METADATA = "os_compute_api:server-metadata:%s"
IPS = "os_compute_api:ips:%s"
VOLUME_ATTACHMENTS = "os_compute_api:os-volumes-attachments:%s"
INSTANCE_ACTIONS = "os_compute_api:os-instance-actions:%s"
SERVER_GROUPS = "os_compute_api:os-server-groups:%s"
AVAILABILITY_ZONE = "os_compute_api:os-availability-zone:%s"
SERVICES = "os_compute_api:os-services:%s"
HYPERVISORS = "os_compute_api:os-hypervisors:%s"
HOSTS = "os_compute_api:os-hosts:%s"
EXTENSIONS = "os_compute_api:extensions"
NETWORKS = "os_compute_api:os-networks:%s"
TENANT_NETWORKS = "os_compute_api:os-tenant-networks:%s"
SERVER_PASSWORD = "os_compute_api:os-server-password:%s"
MIGRATE_SERVER = "os_compute_api:os-migrate-server:%s"
ADMIN_ACTIONS = "os_compute_api:os-admin-actions:%s"
LOCK_SERVER = "os_compute_api:os-lock-server:%s"
DEFERRED_DELETE = "os_compute_api:os-deferred-delete:%s"
CREATE_BACKUP = "os_compute_api:os-create-backup"
SERVER_DIAGNOSTICS = "os_compute_api:os-server-diagnostics"
AGGREGATES = "os_compute_api:os-aggregates:%s"
SIMPLE_TENANT_USAGE = "os_compute_api:os-simple-tenant-usage:%s"
AUDIT_LOG = "os_compute_api:os-instance-usage-audit-log:%s"
MIGRATIONS = "os_compute_api:os-migrations:index"
EXTERNAL_EVENTS = "os_compute_api:os-server-external-events:create"
SUSPEND_SERVER = "os_compute_api:os-suspend-server:%s"
PAUSE_SERVER = "os_compute_api:os-pause-server:%s"
SECURITY_GROUPS = "os_compute_api:os-security-groups:%s"
ATTACH_INTERFACES = "os_compute_api:os-attach-interfaces:%s"
ATTACH_EXTERNAL_NETWORK = "network:attach_external_network"

BASE = [
    ("context_is_admin", "role:admin"),
    ("project_manager_api", "role:manager and project_id:%(project_id)s"),
    ("project_member_api", "role:member and project_id:%(project_id)s"),
    ("project_reader_api", "role:reader and project_id:%(project_id)s"),
    ("service_api", "role:service"),
    ("project_manager_or_admin", "rule:project_manager_api or rule:context_is_admin"),
    ("project_member_or_admin", "rule:project_member_api or rule:context_is_admin"),
    ("project_reader_or_admin", "rule:project_reader_api or rule:context_is_admin"),
    ("service_or_admin", "rule:service_api or rule:context_is_admin"),
]

RULES = [
    (SERVERS % "index", PROJECT_READER_OR_ADMIN),
    (SERVERS % "detail", PROJECT_READER_OR_ADMIN),
    (SERVERS % "index:get_all_tenants", ADMIN),
    (SERVERS % "detail:get_all_tenants", ADMIN),
    (SERVERS % "allow_all_filters", ADMIN),
    (SERVERS % "show", PROJECT_READER_OR_ADMIN),
    (SERVERS % "show:flavor-extra-specs", PROJECT_READER_OR_ADMIN),
    (SERVERS % "show:host_status", ADMIN),
    (SERVERS % "show:host_status:unknown-only", ADMIN),
    (SERVERS % "create", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "create:forced_host", ADMIN),
    ("compute:servers:create:requested_destination", ADMIN),
    (SERVERS % "create:attach_network", PROJECT_MEMBER_OR_ADMIN),
    (ATTACH_EXTERNAL_NETWORK, ADMIN),
    (SERVERS % "create:zero_disk_flavor", ADMIN),
    (SERVERS % "delete", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "update", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "confirm_resize", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "revert_resize", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "reboot", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "resize", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "rebuild", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "rebuild:trusted_certs", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "create_image", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "create_image:allow_volume_backed", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "start", PROJECT_MEMBER_OR_ADMIN),
    (SERVERS % "stop", PROJECT_MEMBER_OR_ADMIN),
    (SUSPEND_SERVER % "suspend", PROJECT_MEMBER_OR_ADMIN),
    (SUSPEND_SERVER % "resume", PROJECT_MEMBER_OR_ADMIN),
    (PAUSE_SERVER % "pause", PROJECT_MEMBER_OR_ADMIN),
    (PAUSE_SERVER % "unpause", PROJECT_MEMBER_OR_ADMIN),
    (CONSOLE_OUTPUT, PROJECT_MEMBER_OR_ADMIN),
    (REMOTE_CONSOLES, PROJECT_MEMBER_OR_ADMIN),
    (SERVER_METADATA % "index", PROJECT_READER_OR_ADMIN),
    (SERVER_METADATA % "show", PROJECT_READER_OR_ADMIN),
    (SERVER_METADATA % "create", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_METADATA % "update_all", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_METADATA % "update", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_METADATA % "delete", PROJECT_MEMBER_OR_ADMIN),
    (IPS % "index", PROJECT_READER_OR_ADMIN),
    (IPS % "show", PROJECT_READER_OR_ADMIN),
    (VOLUME_ATTACHMENTS % "index", PROJECT_READER_OR_ADMIN),
    (VOLUME_ATTACHMENTS % "show", PROJECT_READER_OR_ADMIN),
    (INSTANCE_ACTIONS % "list", PROJECT_READER_OR_ADMIN),
    (INSTANCE_ACTIONS % "show", PROJECT_READER_OR_ADMIN),
    (INSTANCE_ACTIONS % "events", ADMIN),
    (INSTANCE_ACTIONS % "events:details", ADMIN),
    (SERVER_GROUPS % "create", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_GROUPS % "delete", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_GROUPS % "index", PROJECT_READER_OR_ADMIN),
    (SERVER_GROUPS % "index:all_projects", ADMIN),
    (SERVER_GROUPS % "show", PROJECT_READER_OR_ADMIN),
    (AVAILABILITY_ZONE % "list", ANY),
    (AVAILABILITY_ZONE % "detail", ADMIN),
    (SERVICES % "list", ADMIN),
    (SERVICES % "update", ADMIN),
    (SERVICES % "delete", ADMIN),
    (EXTENSIONS, ANY),
    (NETWORKS % "list", ANY),
    (NETWORKS % "view", ANY),
    (TENANT_NETWORKS % "list", PROJECT_READER_OR_ADMIN),
    (TENANT_NETWORKS % "show", PROJECT_READER_OR_ADMIN),
    (SERVER_PASSWORD % "show", PROJECT_READER_OR_ADMIN),
    (SERVER_PASSWORD % "clear", PROJECT_MEMBER_OR_ADMIN),
    (HOSTS % "list", ADMIN),
    (HOSTS % "show", ADMIN),
    (HOSTS % "update", ADMIN),
    (HOSTS % "reboot", ADMIN),
    (HOSTS % "shutdown", ADMIN),
    (HOSTS % "start", ADMIN),
    (HYPERVISORS % "list", ADMIN),
    (HYPERVISORS % "list-detail", ADMIN),
    (HYPERVISORS % "statistics", ADMIN),
    (HYPERVISORS % "show", ADMIN),
    (HYPERVISORS % "uptime", ADMIN),
    (HYPERVISORS % "search", ADMIN),
    (HYPERVISORS % "servers", ADMIN),
    (EXTENDED_ATTRIBUTES, ADMIN),
    *((AGGREGATES % name, ADMIN) for name in (
        "index", "create", "show", "update", "delete", "add_host", "remove_host",
        "set_metadata")),
    (SIMPLE_TENANT_USAGE % "list", ADMIN),
    (SIMPLE_TENANT_USAGE % "show", PROJECT_READER_OR_ADMIN),
    (AUDIT_LOG % "list", ADMIN),
    (AUDIT_LOG % "show", ADMIN),
    (MIGRATIONS, ADMIN),
    (ATTACH_INTERFACES % "list", PROJECT_READER_OR_ADMIN),
    (ATTACH_INTERFACES % "show", PROJECT_READER_OR_ADMIN),
    (ATTACH_INTERFACES % "create", PROJECT_MEMBER_OR_ADMIN),
    (ATTACH_INTERFACES % "delete", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "list", PROJECT_READER_OR_ADMIN),
    (SECURITY_GROUPS % "add", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "remove", PROJECT_MEMBER_OR_ADMIN),
    # The proxy to Neutron's groups (to 2.35), Nova's defaults.
    (SECURITY_GROUPS % "get", PROJECT_READER_OR_ADMIN),
    (SECURITY_GROUPS % "show", PROJECT_READER_OR_ADMIN),
    (SECURITY_GROUPS % "create", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "update", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "delete", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "rule:create", PROJECT_MEMBER_OR_ADMIN),
    (SECURITY_GROUPS % "rule:delete", PROJECT_MEMBER_OR_ADMIN),
    # Nova's default: the service role (Neutron, Cinder, Cyborg send these), not admins.
    (EXTERNAL_EVENTS, "rule:service_or_admin"),
    (MIGRATE_SERVER % "migrate_live", ADMIN),
    (MIGRATE_SERVER % "migrate", ADMIN),
    (ADMIN_ACTIONS % "reset_state", ADMIN),
    (ADMIN_ACTIONS % "inject_network_info", ADMIN),
    (LOCK_SERVER % "lock", PROJECT_MEMBER_OR_ADMIN),
    (LOCK_SERVER % "unlock", PROJECT_MEMBER_OR_ADMIN),
    (LOCK_SERVER % "unlock:unlock_override", ADMIN),
    (DEFERRED_DELETE % "restore", PROJECT_MEMBER_OR_ADMIN),
    (DEFERRED_DELETE % "force", PROJECT_MEMBER_OR_ADMIN),
    (CREATE_BACKUP, PROJECT_MEMBER_OR_ADMIN),
    (SERVER_DIAGNOSTICS, ADMIN),
    (SERVER_TAGS % "index", PROJECT_READER_OR_ADMIN),
    (SERVER_TAGS % "show", PROJECT_READER_OR_ADMIN),
    (SERVER_TAGS % "update", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_TAGS % "update_all", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_TAGS % "delete", PROJECT_MEMBER_OR_ADMIN),
    (SERVER_TAGS % "delete_all", PROJECT_MEMBER_OR_ADMIN),
    (FLAVOR_ACCESS, ADMIN),
    (FLAVOR_ACCESS + ":add_tenant_access", ADMIN),
    (FLAVOR_ACCESS + ":remove_tenant_access", ADMIN),
    (FLAVOR_MANAGE % "create", ADMIN),
    (FLAVOR_MANAGE % "update", ADMIN),
    (FLAVOR_MANAGE % "delete", ADMIN),
    (EXTRA_SPECS % "index", PROJECT_READER_OR_ADMIN),
    (EXTRA_SPECS % "show", PROJECT_READER_OR_ADMIN),
    (EXTRA_SPECS % "create", ADMIN),
    (EXTRA_SPECS % "update", ADMIN),
    (EXTRA_SPECS % "delete", ADMIN),
    (KEYPAIRS % "index", KEYPAIR_OWNER),
    (KEYPAIRS % "create", KEYPAIR_OWNER),
    (KEYPAIRS % "delete", KEYPAIR_OWNER),
    (KEYPAIRS % "show", KEYPAIR_OWNER),
    (LIMITS, ANY),
    (LIMITS_OTHER_PROJECT, ADMIN),
    (QUOTA_CLASS_SETS % "show", ADMIN),
    (QUOTA_CLASS_SETS % "update", ADMIN),
    (QUOTA_SETS % "update", ADMIN),
    (QUOTA_SETS % "defaults", ANY),
    (QUOTA_SETS % "show", PROJECT_READER_OR_ADMIN),
    (QUOTA_SETS % "delete", ADMIN),
    (QUOTA_SETS % "detail", PROJECT_READER_OR_ADMIN),
]


class PolicyNotAuthorized(Exception):
    """A rule refused the caller (403, Nova's message)."""

    def __init__(self, action: str):
        super().__init__(f"Policy doesn't allow {action} to be performed.")
        self.action = action


def defaults() -> list[policy.RuleDefault]:
    """Every rule with its default (base rules first), project-scoped as Nova's."""
    base = [policy.RuleDefault(name, check) for name, check in BASE]
    return base + [policy.RuleDefault(name, check, scope_types=["project"])
                   for name, check in RULES]


class Policy:
    """The rules of this API: Nova's defaults, overridden by `policy_file` if given."""

    def __init__(self, policy_file: str | None = None):
        conf = cfg.ConfigOpts()
        conf([], project="etcd-compute", default_config_files=[], default_config_dirs=[])
        # No policy.d, and no file found by name in /etc/etcd-compute or ~ behind our back:
        # the defaults, or exactly the file configured (os.devnull reads as no rules).
        policy_opts.set_defaults(conf, enforce_scope=True, enforce_new_defaults=True,
                                 policy_dirs=[])
        self.enforcer = policy.Enforcer(conf, policy_file=policy_file or os.devnull)
        self.enforcer.register_defaults(defaults())
        if policy_file is not None and not os.path.isfile(policy_file):
            raise ConfigError(f"api.policy_file {policy_file}: no such file")
        # A bad file is found now (one line at start), not at the first request.
        try:
            self.enforcer.load_rules()
        except Exception as exc:  # noqa: BLE001 (oslo.policy raises what its parsers raise)
            raise ConfigError(f"api.policy_file {policy_file}: {exc}") from None

    def allows(self, context: Context, action: str, target: dict[str, Any] | None = None) -> bool:
        return bool(self.enforcer.authorize(action, self._target(context, target),
                                            context.oslo, do_raise=False))

    def authorize(self, context: Context, action: str,
                  target: dict[str, Any] | None = None) -> None:
        """PolicyNotAuthorized unless the rule `action` lets the caller act on `target`
        (by default the caller's own project and user, as Nova's)."""
        if not self.allows(context, action, target):
            raise PolicyNotAuthorized(action)

    def is_admin(self, context: Context) -> bool:
        return self.allows(context, "context_is_admin")

    @staticmethod
    def _target(context: Context, target: dict[str, Any] | None) -> dict[str, Any]:
        return target if target is not None else {"project_id": context.project_id,
                                                  "user_id": context.user_id}
