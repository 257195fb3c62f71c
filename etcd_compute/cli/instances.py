"""schedule.py's instance commands: place (a QUERY), show (a UUID), destroy, list.

The work is in `etcd_compute.ops` (and the scheduler, or the scheduler service
through its queue); instances in child zones are reached through cli/zones.py.
Modules behind a command are imported when it runs: a short-lived command pays for
every import, and the queue's path needs neither the Placement client nor the planner.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from etcd_compute.cli import Commands, output, placement_of, store_of, terminal_line
from etcd_compute.cli import zones as zones_cli
from etcd_compute.errors import NoValidHost, UsageError

UUID_WORDS = "expected exactly one instance uuid"
QUERY_HELP = """\
QUERY keys (Placement's GET /allocation_candidates syntax, microversion 1.39):
  resources=RC:N,...   required=T,!T  required=in:T1,T2   member_of=AGG|in:A,B|!AGG
  in_tree=RP   granular groups: resources1=..&required1=..   group_policy=none|isolate
  limit=N      (join with &, quote the whole query for the shell)
--zone AGG (a uuid) is member_of=AGG: a Placement aggregate as availability zone; a
compute joins one with compute.aggregates in compute.yaml. --zone NAME or a/b: that child
zone (another installation, see zone add) and those below it; --zone <this zone's name>:
only this zone's own hosts.
"""


def add_commands(commands: Commands) -> None:
    place = commands.add(
        "place", "place instances (`schedule.py QUERY` is `schedule.py place QUERY`)",
        handler=cmd_place, description="Place instances where QUERY fits: through the "
        "scheduler service when one runs, else here.\n\n" + QUERY_HELP)
    place.add_argument("query", metavar="QUERY", help="what to place (resources=...)")
    place.add_argument("--count", type=int, default=1, metavar="N",
                       help="place N instances, all or nothing (default 1)")
    place.add_argument("--name", help="instance name (NAME-1..NAME-N with --count)")
    place.add_argument("--image", metavar="IMAGE",
                       help="image to boot: an image in Glance (name or id, as "
                            "scheduler.project_id sees it) or a URL (http(s):// or file://)")
    place.add_argument("--user-data", metavar="FILE", help="cloud-init user data file")
    place.add_argument("--key", metavar="FILE", help="ssh public key file for the guest")
    place.add_argument("--zone", metavar="AZ|ZONE",
                       help="an aggregate uuid (member_of), or a child zone NAME or PATH "
                            "(a/b) to place in, or this zone's name (its own hosts only)")
    place.add_argument("--hint", action="append", default=[], metavar="POLICY=GROUP",
                       help="server group: affinity=GROUP, anti-affinity=GROUP (hard: no "
                            "valid host rather than break it), soft-affinity=GROUP or "
                            "soft-anti-affinity=GROUP (best effort)")
    place.add_argument("--on-host-failure", choices=["rebuild", "error"],
                       help="when its host dies: rebuild it elsewhere from its image (its "
                            "local disk is lost) or end it in ERROR (default: "
                            "scheduler.on_host_failure)")
    place.add_argument("--no-network", action="store_true",
                       help="the guests get no network interface (and, under the neutron "
                            "backend, no port)")
    place.add_argument("--wait", action="store_true",
                       help="follow the instances until ACTIVE or ERROR")
    show = commands.add("show", "an instance: state, host, IP, resources, error "
                                "(`schedule.py UUID` is `schedule.py show UUID`)",
                        UUID_WORDS, cmd_show)
    show.add_argument("uuid", metavar="UUID")
    destroy = commands.add("destroy", "ask its host to destroy an instance", UUID_WORDS,
                           cmd_destroy)
    destroy.add_argument("uuid", metavar="UUID")
    destroy.add_argument("--wait", action="store_true", help="follow it until DELETED")
    listing = commands.add("list", "every instance (on a host, in a state, of a project)",
                           "takes no arguments", cmd_list)
    listing.add_argument("--host", metavar="HOST",
                         help="only instances on this host (its name or provider uuid)")
    listing.add_argument("--state", metavar="STATE",
                         help="only instances in this state (active, error...; any case)")
    listing.add_argument("--project", metavar="PROJECT_ID",
                         help="only instances of this project (a Keystone project id; "
                              "schedule.py's own are scheduler.project_id's)")


# ------------------------------------------------------------------------- place


def _read_file(option: str, path: str | None) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{option} {path}: cannot read ({exc.__class__.__name__})") from None


def _group(hints: list[str]) -> tuple[str, str] | None:
    if not hints:
        return None
    if len(hints) > 1:
        raise UsageError("--hint: give at most one server group")
    policy, sep, name = hints[0].partition("=")
    if not sep:
        raise UsageError(f"--hint {hints[0]!r}: expected affinity=GROUP or anti-affinity=GROUP")
    return name, policy


def cmd_place(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """Place the instances: through the scheduler service when one runs (the queue in
    etcd), else here; the same output and exit status either way."""
    from etcd_compute.cli import images as images_cli
    from etcd_compute.scheduler.spec import RequestSpec

    aggregate, route = zones_cli.zone_option(args.zone, config)
    glance_name = args.image if args.image and not images_cli.is_url(args.image) else None
    request_spec = RequestSpec.build(
        args.query, count=args.count, name=args.name,
        image_url=None if glance_name else args.image,
        user_data=_read_file("--user-data", args.user_data),
        ssh_key=_read_file("--key", args.key), group=_group(args.hint), zone=aggregate,
        required_resources=config["scheduler"]["required_resources"],
        on_host_failure=args.on_host_failure, network=not args.no_network,
    )
    if glance_name:
        # Found in Glance as the requesting project sees it, before anything is claimed.
        request_spec.glance_image = images_cli.glance_image(config, glance_name,
                                                           request_spec.request.resources)
    with store_of(config) as store:
        # A request for child zones goes there directly, never through this zone's service.
        if zones_cli.federated(store, route):
            return _federate(args, config, store, request_spec, route)
        try:
            destinations, conflicts = _select(config, store, request_spec)
        except NoValidHost as exc:
            return output.no_valid_host(args.json, exc)
        if args.json and not args.wait:
            output.emit_json({"instances": [d.as_dict() for d in destinations],
                              "conflicts": conflicts})
        elif not args.json:
            for destination in destinations:
                print(f"NOTIFIED TARGET, {destination.host}, OF INSTANCE {destination.uuid}",
                      flush=True)
        if not args.wait:
            return 0
        from etcd_compute.instances import states
        from etcd_compute.ops import operations

        final = operations.wait(store, [d.uuid for d in destinations],
                                frozenset({states.ACTIVE, states.ERROR, states.DELETED}),
                                config["scheduler"]["wait_timeout_seconds"],
                                output.progress_of(args.json))
        if args.json:
            output.emit_json({"instances": [{**d.as_dict(), "record": final.get(d.uuid)}
                                            for d in destinations],
                              "conflicts": conflicts})
        ok = all(r is not None and r["state"] == states.ACTIVE for r in final.values())
        return 0 if ok else 1


def _federate(args: argparse.Namespace, config: dict[str, Any], store: Any,
              request_spec: Any, route: str | None) -> int:
    """A request across zones (cli/zones.py), planned here and in the zones below."""
    from etcd_compute.scheduler.scheduler import Scheduler

    scheduler = Scheduler(config, store=store)
    try:
        return zones_cli.schedule(args, config, scheduler, request_spec, route)
    finally:
        scheduler.close()


def _select(config: dict[str, Any], store: Any, request_spec: Any) -> tuple[list[Any], int]:
    """(destinations, Placement 409s met on the way): the service's answer when a service
    takes requests, else our own scheduling (imported only then: the queue's path needs
    no Placement client)."""
    if config["scheduler"]["use_service"]:
        from etcd_compute.ops.queue_client import QueueClient

        # Placement only to take back an answer nobody can stand by (made when needed).
        client = QueueClient(store, config["scheduler"], lambda: placement_of(config))
        destinations = client.schedule(request_spec)
        if destinations is not None:
            return destinations, client.conflicts
    from etcd_compute.scheduler.scheduler import Scheduler

    scheduler = Scheduler(config, store=store)
    try:
        return scheduler.select_destinations(request_spec), scheduler.placement.conflicts
    finally:
        scheduler.close()


# ------------------------------------------------------------------ show, destroy


def cmd_show(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.instances.states import security_groups
    from etcd_compute.ops import operations

    uuid = operations.check_uuid(args.uuid)
    with zones_cli.instance_zone(config, uuid) as zone:
        record = operations.show(zone.store, uuid)
    if zone.path:
        record = {**record, "zone": zone.path}
    if args.json:
        output.emit_json(record)
        return 0
    host = record.get("host_name") or "-"
    if record.get("host"):
        host = f"{host} ({record['host']})"
    task = record.get("task")  # the action running now, and who asked for it
    state = record["state"] if not task else (
        f"{record['state']} ({task.get('action') or 'action'} asked by "
        f"{task.get('by') or '-'} at {output.when(task.get('at'))})")
    rows = [["uuid", record["uuid"]], ["name", record.get("name") or "-"],
            ["state", state], ["host", host], ["ip", record.get("ip") or "-"],
            ["resources", output.resources_text(record.get("resources"))],
            ["image", record.get("image") or "-"], ["group", record.get("group") or "-"],
            ["secgroups", ", ".join(security_groups(record)) or "none"],
            ["error", record.get("error") or "-"],
            ["created", output.when(record.get("created_at"))],
            ["updated", output.when(record.get("updated_at"))],
            *([["zone", record["zone"]]] if record.get("zone") else [])]
    for key, value in rows:
        print(f"{key:<10} {terminal_line(str(value))}")
    return 0


DESTROYED = {
    "requested": "DESTROY REQUESTED FOR INSTANCE {uuid}",
    "already": "DESTROY ALREADY REQUESTED FOR INSTANCE {uuid}",
    "removed": "REMOVED INSTANCE {uuid} (no host held it; record and claim removed)",
    "deleted": "INSTANCE {uuid} IS ALREADY DELETED",
    "finished": "DELETED INSTANCE {uuid} (its host is down: claim freed here; the host "
                "cleans up if it returns)",
}


def cmd_destroy(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.instances import states
    from etcd_compute.ops import operations

    uuid = operations.check_uuid(args.uuid)
    with zones_cli.instance_zone(config, uuid) as zone:
        outcome = operations.destroy(zone.store, zone.placement, uuid,
                                     config["scheduler"]["deleted_record_ttl"])
        if args.wait and outcome in ("requested", "already"):
            last = operations.wait(zone.store, [uuid], frozenset({states.DELETED}),
                                   config["scheduler"]["wait_timeout_seconds"],
                                   output.progress_of(args.json))
            if (last.get(uuid) or {}).get("state") == states.DELETED:
                operations.destroyed(zone.store, uuid)
        if args.json:
            output.emit_json({"uuid": uuid, "outcome": outcome})
        else:
            print(DESTROYED[outcome].format(uuid=uuid))
        return 0


# --------------------------------------------------------------------------- list


def cmd_list(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import operations

    if args.state is not None:
        operations.check_state(args.state)  # before any connection
    with zones_cli.zone_tree(config) as tree:
        found, unreachable = zones_cli.list_instances(tree, args.host, args.state)
    if args.project is not None:
        found = [r for r in found if r.get("project_id") == args.project]
    for zone, reason in unreachable.items():
        output.note(f"zone {zone} unreachable, its instances not listed: {reason}")
    if args.json:
        output.emit_json(found)
        return 0
    zoned = any("zone" in r for r in found) or bool(unreachable)
    output.table([[r["uuid"], r.get("name") or "-", r["state"], r.get("host_name") or "-",
                   r.get("ip") or "-", output.resources_text(r.get("resources")),
                   *([r.get("zone", "-")] if zoned else [])] for r in found],
                 ["UUID", "NAME", "STATE", "HOST", "IP", "RESOURCES",
                  *(["ZONE"] if zoned else [])])
    return 0
