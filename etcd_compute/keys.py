"""The etcd key layout, in one place.

Everything a compute host writes is a key of its own, so etcd's prefix
permissions can give each host exactly its keys (see `etcd_auth.py`):

    /hosts/<rp_uuid>/specs/<instance_uuid>      instance_spec: what the host must do
    /hosts/<rp_uuid>/instances/<instance_uuid>  instance_record: state, ip, error
    /hosts/<rp_uuid>/booted/<instance_uuid>     the guest IP (kept from the original toy)
    /hosts/<rp_uuid>/console/<instance_uuid>    tail of the serial log
    /hosts/<rp_uuid>/events/<instance_uuid>     instance_events: the last actions on it
    /hosts/<rp_uuid>/password/<instance_uuid>   server_password: what the guest POSTed to
                                                its metadata server (the compute API reads
                                                and deletes it: os-server-password)
    /hosts/<rp_uuid>/external-events/<instance_uuid>
                                                external_events: what Neutron told the
                                                compute API of it (written by the API)
    /alive/<rp_uuid>                            heartbeat, bound to the host's lease
    /stats/<rp_uuid>                            host_stats: recent build failures ...

and what only the operator's side (scheduler, CLI, controller) writes:

    /instances/<instance_uuid>                  instance_location: which host holds it
    /groups/<name>/<instance_uuid>              server group membership
    /maintenance/<rp_uuid>                      host_maintenance: disabled by an operator
    /controller/leader                          the elected `schedule.py serve`
    /queue/open                                 queue_open: the scheduler service takes
                                                requests (bound to the leader's lease)
    /queue/requests/<request_uuid>              schedule_request: a schedule.py waiting
    /queue/answers/<request_uuid>               schedule_answer: where its instances went
    /zones/<name>                               zone: a child zone's endpoints, credential paths
    /zone-of/<instance_uuid>                    zone_instance: the child zone an instance was
                                                placed in from here (its path, `a/b`)
    /zone-intents/<request_uuid>                zone_intent: a request across zones in flight
                                                (what to undo if it is cut short)

and what only the compute API (`schedule.py api`, operator's credentials) writes:

    /servers/<instance_uuid>                    server: the API's view of an instance (its
                                                project, display name, flavor, metadata...)
    /flavors/<flavor_id>                        flavor
    /flavor-names/<name>                        flavor_name: which flavor has this name
    /keypairs/<user_id>/<name>                  keypair: a user's public key
    /quotas/<project_id>                        quota_set: a project's limits (else defaults)
    /quota-users/<project_id>/<user_id>         quota_set: a user's limits in the project
                                                (else the project's)
    /quota-classes/default                      quota_class: the defaults where an admin
                                                changed api.quotas' (os-quota-class-sets)
    /quota-reservations/<project_id>/<uuid>     quota_reservation: a create counted before
                                                its claim (with a lease)
    /aggregates/<id>                            aggregate: a host aggregate (os-aggregates);
                                                its hosts mirrored to Placement
    /aggregate-names/<name>                     aggregate_name: which aggregate has this name
    /aggregate-last-id                          aggregate_last_id: the last id given
    /console-tokens/<sha256 of the token>       console_token: a remote console's
                                                single-use token (with a lease; also
                                                written by `schedule.py console --url`,
                                                consumed by the console proxy)

Hosts get no access to /queue/ at all: a request carries tenants' user-data,
and only operators may ask for instances.

Everything sits under a configurable prefix so several deployments (or tests)
can share one etcd.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# An instance or resource provider uuid as we write them: lower case, canonical form.
UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")

# Per-instance key kinds under /hosts/<rp>/.
SPECS, RECORDS, BOOTED, CONSOLE, EVENTS = "specs", "instances", "booted", "console", "events"
EXTERNAL_EVENTS = "external-events"
PASSWORD = "password"
HOST_KINDS = (SPECS, RECORDS, BOOTED, CONSOLE, EVENTS, EXTERNAL_EVENTS, PASSWORD)


@dataclass(frozen=True)
class HostKey:
    """A per-instance key under /hosts/, parsed."""

    host: str
    kind: str
    uuid: str


@dataclass(frozen=True)
class Keys:
    prefix: str = ""

    def everything(self) -> str:
        """Every key of ours starts with this (what the controller watches)."""
        return f"{self.prefix}/"

    # --- one host's keys ---------------------------------------------------------------

    def hosts(self) -> str:
        return f"{self.prefix}/hosts/"

    def host(self, rp_uuid: str) -> str:
        """Every key of this host starts with this (its etcd role's prefix)."""
        return f"{self.prefix}/hosts/{rp_uuid}/"

    def specs(self, rp_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{SPECS}/"

    def spec(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.specs(rp_uuid)}{instance_uuid}"

    def records(self, rp_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{RECORDS}/"

    def record(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.records(rp_uuid)}{instance_uuid}"

    def booted(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{BOOTED}/{instance_uuid}"

    def console(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{CONSOLE}/{instance_uuid}"

    def events(self, rp_uuid: str, instance_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{EVENTS}/{instance_uuid}"

    def passwords(self, rp_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{PASSWORD}/"

    def password(self, rp_uuid: str, instance_uuid: str) -> str:
        """The guest's password, published by its host; the compute API deletes it to clear
        it (os-server-password), and the host then forgets it too."""
        return f"{self.passwords(rp_uuid)}{instance_uuid}"

    def external_events_prefix(self, rp_uuid: str) -> str:
        return f"{self.host(rp_uuid)}{EXTERNAL_EVENTS}/"

    def external_events(self, rp_uuid: str, instance_uuid: str) -> str:
        """What other services (Neutron) said of the instance: the compute API writes it
        (operator's credentials) under the host's prefix, for the host to read."""
        return f"{self.external_events_prefix(rp_uuid)}{instance_uuid}"

    def alive_prefix(self) -> str:
        return f"{self.prefix}/alive/"

    def alive(self, rp_uuid: str) -> str:
        return f"{self.prefix}/alive/{rp_uuid}"

    def stats_prefix(self) -> str:
        return f"{self.prefix}/stats/"

    def stats(self, rp_uuid: str) -> str:
        return f"{self.prefix}/stats/{rp_uuid}"

    # --- the operator's keys -------------------------------------------------------------

    def locations(self) -> str:
        return f"{self.prefix}/instances/"

    def location(self, instance_uuid: str) -> str:
        return f"{self.prefix}/instances/{instance_uuid}"

    def groups(self) -> str:
        return f"{self.prefix}/groups/"

    def group(self, name: str) -> str:
        return f"{self.prefix}/groups/{name}/"

    def group_member(self, name: str, instance_uuid: str) -> str:
        return f"{self.prefix}/groups/{name}/{instance_uuid}"

    def maintenance_prefix(self) -> str:
        return f"{self.prefix}/maintenance/"

    def maintenance(self, rp_uuid: str) -> str:
        """An operator's disable (host_maintenance): the host reads it, never writes it."""
        return f"{self.prefix}/maintenance/{rp_uuid}"

    def migrations(self) -> str:
        return f"{self.prefix}/migrations/"

    def migration(self, instance_uuid: str) -> str:
        """A move in flight (migration): written by operators and the controller only."""
        return f"{self.prefix}/migrations/{instance_uuid}"

    def controller(self) -> str:
        return f"{self.prefix}/controller/"

    def leader(self) -> str:
        return f"{self.prefix}/controller/leader"

    # --- the scheduler service's queue (operators only) ------------------------------------

    def queue(self) -> str:
        return f"{self.prefix}/queue/"

    def queue_open(self) -> str:
        """Present while a scheduler service leads (bound to its lease)."""
        return f"{self.prefix}/queue/open"

    def queue_requests(self) -> str:
        return f"{self.prefix}/queue/requests/"

    def queue_request(self, request_uuid: str) -> str:
        return f"{self.prefix}/queue/requests/{request_uuid}"

    def queue_answer(self, request_uuid: str) -> str:
        return f"{self.prefix}/queue/answers/{request_uuid}"

    # --- zones (the operator's side only; see etcd_compute/zones/) -----------------------

    def zones(self) -> str:
        return f"{self.prefix}/zones/"

    def zone(self, name: str) -> str:
        return f"{self.prefix}/zones/{name}"

    def zone_index(self) -> str:
        return f"{self.prefix}/zone-of/"

    def zone_of(self, instance_uuid: str) -> str:
        return f"{self.prefix}/zone-of/{instance_uuid}"

    def zone_intents(self) -> str:
        return f"{self.prefix}/zone-intents/"

    def zone_intent(self, request_uuid: str) -> str:
        return f"{self.prefix}/zone-intents/{request_uuid}"

    # --- the compute API's (the operator's side only; see etcd_compute/api/) ---------------

    def servers(self) -> str:
        return f"{self.prefix}/servers/"

    def server(self, instance_uuid: str) -> str:
        return f"{self.prefix}/servers/{instance_uuid}"

    def flavors(self) -> str:
        return f"{self.prefix}/flavors/"

    def console_tokens(self) -> str:
        return f"{self.prefix}/console-tokens/"

    def console_token(self, digest: str) -> str:
        return f"{self.prefix}/console-tokens/{digest}"

    def flavor(self, flavor_id: str) -> str:
        return f"{self.prefix}/flavors/{flavor_id}"

    def flavor_name(self, name: str) -> str:
        return f"{self.prefix}/flavor-names/{name}"

    def keypairs(self, user_id: str) -> str:
        return f"{self.prefix}/keypairs/{user_id}/"

    def keypair(self, user_id: str, name: str) -> str:
        return f"{self.prefix}/keypairs/{user_id}/{name}"

    def quotas(self) -> str:
        return f"{self.prefix}/quotas/"

    def quota(self, project_id: str) -> str:
        return f"{self.prefix}/quotas/{project_id}"

    def quota_user(self, project_id: str, user_id: str) -> str:
        return f"{self.prefix}/quota-users/{project_id}/{user_id}"

    def quota_class(self, name: str) -> str:
        return f"{self.prefix}/quota-classes/{name}"

    def quota_reservations(self, project_id: str) -> str:
        return f"{self.prefix}/quota-reservations/{project_id}/"

    def quota_reservation(self, project_id: str, reservation: str) -> str:
        return f"{self.prefix}/quota-reservations/{project_id}/{reservation}"

    def aggregates(self) -> str:
        return f"{self.prefix}/aggregates/"

    def aggregate(self, aggregate_id: int) -> str:
        return f"{self.prefix}/aggregates/{aggregate_id}"

    def aggregate_name(self, name: str) -> str:
        return f"{self.prefix}/aggregate-names/{name}"

    def aggregate_last_id(self) -> str:
        return f"{self.prefix}/aggregate-last-id"

    def server_groups(self) -> str:
        return f"{self.prefix}/server-groups/"

    def server_group(self, group_uuid: str) -> str:
        return f"{self.prefix}/server-groups/{group_uuid}"

    # --- parsing -------------------------------------------------------------------------

    def parse_host_key(self, key: str) -> HostKey | None:
        """/hosts/<rp>/<kind>/<uuid> parsed, or None for any other key (extra or empty
        segments, an unknown kind)."""
        if not key.startswith(self.hosts()):
            return None
        parts = key[len(self.hosts()):].split("/")
        if len(parts) != 3 or not all(parts) or parts[1] not in HOST_KINDS:
            return None
        return HostKey(parts[0], parts[1], parts[2])

    def parse_spec(self, key: str) -> tuple[str, str] | None:
        """(rp_uuid, instance_uuid) from a spec key, or None if it is not one."""
        parsed = self.parse_host_key(key)
        if parsed is None or parsed.kind != SPECS:
            return None
        return parsed.host, parsed.uuid
