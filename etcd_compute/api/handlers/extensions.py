"""/extensions (Nova's deprecated extensions list): the v2 extensions this API serves, by
Nova's names, and only those (Nova lists all of its own whatever a cloud has; a client
that reads this list learns here what it can use). Unknown alias: 404.

One exception, `os-consoles`: Nova lists it on every cloud, though the API it named
(XenAPI's console proxies) is gone since Nova 21 and what it describes, interactive
consoles, depends on the drivers; clients (and Tempest) look it up. Listed as Nova lists
it, it promises no API (os-consoles itself is 404 here as in Nova)."""

from __future__ import annotations

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.wsgi import ApiRequest, Router, json_response, not_found

# (alias, name, description), Nova's, of what is served here.
SERVED = (
    ("OS-DCF", "DiskConfig", "Disk Management Extension."),
    ("OS-EXT-AZ", "ExtendedAvailabilityZone", "Extended Availability Zone support."),
    ("OS-EXT-IPS", "ExtendedIps", "Adds type parameter to the ip list."),
    ("OS-EXT-SRV-ATTR", "ExtendedServerAttributes", "Extended Server Attributes support."),
    ("OS-EXT-STS", "ExtendedStatus", "Extended Status support."),
    ("OS-FLV-DISABLED", "FlavorDisabled", "Support to show the disabled status of a flavor."),
    ("OS-FLV-EXT-DATA", "FlavorExtraData", "Provide additional data for flavors."),
    ("OS-SCH-HNT", "SchedulerHints", "Pass arbitrary key/value pairs to the scheduler."),
    ("OS-SRV-USG", "ServerUsage", "Adds launched_at and terminated_at on Servers."),
    ("os-access-ips", "AccessIPs", "Access IPs support."),
    ("os-admin-actions", "AdminActions", "Enable admin-only server actions (os-resetState)."),
    ("os-aggregates", "Aggregates", "Admin-only aggregate administration."),
    ("os-availability-zone", "AvailabilityZone",
     "1. Add availability_zone to the Create Server API.\n"
     "       2. Add availability zones describing.\n    "),
    ("os-config-drive", "ConfigDrive", "Config Drive Extension."),
    ("os-console-output", "ConsoleOutput", "Console log output support, with tailing ability."),
    ("os-consoles", "Consoles", "Interactive Console support."),
    ("os-create-backup", "CreateBackup", "Create a backup of a server."),
    ("os-deferred-delete", "DeferredDelete", "Instance deferred delete."),
    ("os-extended-quotas", "ExtendedQuotas", "Adds ability for admins to delete quota and "
                                             "optionally force the update Quota command."),
    ("os-extended-services", "ExtendedServices", "Extended services support."),
    ("os-extended-services-delete", "ExtendedServicesDelete",
     "Extended services deletion support."),
    ("os-flavor-access", "FlavorAccess", "Flavor access support."),
    ("os-flavor-extra-specs", "FlavorExtraSpecs", "Flavors extra specs support."),
    ("os-flavor-manage", "FlavorManage", "Flavor create/delete API support."),
    ("os-flavor-rxtx", "FlavorRxtx", "Support to show the rxtx status of a flavor."),
    ("os-flavor-swap", "FlavorSwap", "Support to show the swap status of a flavor."),
    ("os-hide-server-addresses", "HideServerAddresses",
     "Support hiding server addresses in certain states."),
    ("os-hosts", "Hosts", "Admin-only host administration."),
    ("os-hypervisor-status", "HypervisorStatus", "Show hypervisor status."),
    ("os-hypervisors", "Hypervisors", "Admin-only hypervisor administration."),
    ("os-instance-actions", "InstanceActions",
     "View a log of actions and events taken on an instance."),
    ("os-instance-usage-audit-log", "OSInstanceUsageAuditLog",
     "Admin-only Task Log Monitoring."),
    ("os-keypairs", "Keypairs", "Keypair Support."),
    ("os-lock-server", "LockServer", "Lock/Unlock instance."),
    ("os-migrate-server", "MigrateServer", "Enable migrate and live-migrate server actions."),
    ("os-migrations", "Migrations", "Provide data on migrations."),
    ("os-multiple-create", "MultipleCreate",
     "Allow multiple create in the Create Server v2.1 API."),
    ("os-pause-server", "PauseServer", "Enable pause/unpause server actions."),
    ("os-quota-sets", "Quotas", "Quotas management support."),
    ("os-server-diagnostics", "ServerDiagnostics",
     "Allow Admins to view server diagnostics through server action."),
    ("os-server-external-events", "ServerExternalEvents", "Server External Event Triggers."),
    ("os-server-group-quotas", "ServerGroupQuotas", "Adds quota support to server groups."),
    ("os-server-groups", "ServerGroups", "Server group support."),
    ("os-server-list-multi-status", "ServerListMultiStatus",
     "Allow to filter the servers by a set of status values."),
    ("os-server-sort-keys", "ServerSortKeys", "Add sorting support in get Server v2 API."),
    ("os-server-start-stop", "ServerStartStop", "Start/Stop instance compute API support."),
    ("os-services", "Services", "Services support."),
    ("os-simple-tenant-usage", "SimpleTenantUsage", "Simple tenant usage extension."),
    ("os-suspend-server", "SuspendServer", "Enable suspend/resume server actions."),
    ("os-used-limits", "UsedLimits", "Provide data on limited resources that are being used."),
    ("os-used-limits-for-admin", "UsedLimitsForAdmin",
     "Provide data to admin on limited resources used by other tenants."),
    ("os-user-data", "UserData", "Add user_data to the Create Server API."),
    ("os-user-quotas", "UserQuotas", "Project user quota support."),
)


def _extension(alias: str, name: str, description: str) -> dict[str, object]:
    return {"alias": alias, "name": name, "description": description, "links": [],
            "namespace": "http://docs.openstack.org/compute/ext/fake_xml",
            "updated": "2014-12-03T00:00:00Z"}


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/extensions", lambda req: index(api, req))
    router.add("GET", "/extensions/{alias}", lambda req, alias: show(api, req, alias))


def index(api: Backend, req: ApiRequest) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTENSIONS, {})
    return json_response({"extensions": [_extension(*served) for served in SERVED]})


def show(api: Backend, req: ApiRequest, alias: str) -> webob.Response:
    api.policy.authorize(req.context, policy.EXTENSIONS, {})
    for served in SERVED:
        if served[0] == alias:
            return json_response({"extension": _extension(*served)})
    raise not_found("The resource could not be found.")
