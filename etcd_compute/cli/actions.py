"""schedule.py's actions on an instance: stop, start, suspend, resume, pause, unpause,
reboot, rebuild, resize, security-groups (and the confirm or revert of a resize the compute
API holds); migrate (to another host, live or cold) and migrate-abort; its events.

Each is refused before anything is written when the instance's state does not allow it
(exit 1), else written into its host's spec; --wait follows it until its host has done
it (`ops/lifecycle.py`). Instances in a child zone are acted on there, as destroy is.
"""

from __future__ import annotations

import argparse
from typing import Any

from etcd_compute.cli import Commands, output, placement_of, store_of, terminal_line
from etcd_compute.cli import zones as zones_cli

UUID_WORDS = "expected exactly one instance uuid"
SUMMARIES = {
    "stop": "power an instance off (SHUTOFF); its disk, claim and IP are kept",
    "start": "power a stopped instance on again",
    "suspend": "stop an instance keeping its memory on its host's disk (SUSPENDED); its "
               "disk, claim and IP are kept",
    "resume": "run a suspended instance again from the memory suspend kept",
    "pause": "freeze an instance's guest, its memory kept in its host's RAM (PAUSED); its "
             "disk, claim and IP are kept",
    "unpause": "run a paused instance on from where pause froze it",
    "reboot": "restart an instance's guest (asked first, or at once with --hard)",
    "rebuild": "a fresh disk from its image (or --image), same uuid, IP, claim and host",
    "resize": "a new size (resources=... only) on the same host, claimed first",
    "revert-resize": "back to the old size a resize through the compute API holds "
                     "(VERIFY_RESIZE)",
    "security-groups": "put an instance in the default security group (the network as it "
                       "is) or in none (its traffic dropped but DHCP)",
}
# The word for no security group at all.
NO_GROUP = "none"


def add_commands(commands: Commands) -> None:
    for action, summary in SUMMARIES.items():
        words = {"resize": "expected QUERY UUID",
                 "security-groups": "expected default|none UUID"}.get(action, UUID_WORDS)
        parser = commands.add(action, summary, words, cmd_action)
        if action == "security-groups":
            parser.add_argument("groups", metavar="default|none", choices=("default", NO_GROUP),
                                help="default: guests reach each other and NAT out; none: "
                                     "nothing but its DHCP (anti-spoofing and the host guard "
                                     "apply either way)")
        if action == "resize":
            parser.add_argument("query", metavar="QUERY",
                                help="the new size: resources=RC:N,... (nothing else)")
        parser.add_argument("uuid", metavar="UUID")
        if action == "reboot":
            parser.add_argument("--hard", action="store_true",
                                help="power the guest off at once instead of asking it first")
        if action == "rebuild":
            parser.add_argument("--image", metavar="IMAGE",
                                help="the new image: in Glance (name or id) or a URL, "
                                     "http(s):// or file:// (default: the one it has)")
        parser.add_argument("--wait", action="store_true",
                            help="follow the action until its host has done it")
    confirm = commands.add("confirm-resize", "keep the new size of a resize through the "
                                             "compute API (VERIFY_RESIZE): its old size is "
                                             "freed", UUID_WORDS, cmd_confirm)
    confirm.add_argument("uuid", metavar="UUID")
    migrate = commands.add("migrate", "move an instance to another host: cold (stopped, "
                                      "its disk copied, started there) or --live (running "
                                      "all along)", UUID_WORDS, cmd_migrate)
    migrate.add_argument("uuid", metavar="UUID")
    migrate.add_argument("--live", action="store_true",
                         help="move it running, its memory and disk copied as it goes")
    migrate.add_argument("--host", metavar="HOST",
                         help="where to (a provider name or uuid; default: where the "
                              "scheduler would put it now)")
    migrate.add_argument("--verify", action="store_true",
                         help="cold: once defined there, wait for migrate-confirm or "
                              "migrate-revert (the source keeps its stopped copy and claim)")
    migrate.add_argument("--wait", action="store_true",
                         help="follow the move until it is done or given up (or, with "
                              "--verify, awaits its confirm)")
    for name, what in (("migrate-confirm", "keep a cold move asked with --verify: the "
                                           "source's copy and claim freed"),
                       ("migrate-revert", "undo a cold move asked with --verify: back on "
                                          "the source, started again if it ran")):
        command = commands.add(name, what, UUID_WORDS, cmd_migrate_verified)
        command.add_argument("uuid", metavar="UUID")
        if name == "migrate-revert":
            command.add_argument("--wait", action="store_true",
                                 help="follow it until the source runs its copy again (the "
                                      "controller starts it once the destination discarded "
                                      "its own)")
    abort = commands.add("migrate-abort", "call an instance's move off (it stays where it "
                                          "is)", UUID_WORDS, cmd_migrate_abort)
    abort.add_argument("uuid", metavar="UUID")
    events = commands.add("events", "what happened to an instance: action, who asked, host, "
                                    "when, result", UUID_WORDS, cmd_events)
    events.add_argument("uuid", metavar="UUID")


def cmd_action(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """stop|start|suspend|resume|pause|unpause|reboot|rebuild UUID, resize QUERY UUID,
    security-groups default|none UUID."""
    from etcd_compute.ops import lifecycle, operations

    action = args.command
    uuid = operations.check_uuid(args.uuid)
    resources = (lifecycle.resize_request(args.query, config["scheduler"]["required_resources"])
                 if action == "resize" else None)
    from etcd_compute.cli import images as images_cli

    wanted = getattr(args, "image", None)
    glance_name = wanted if wanted and not images_cli.is_url(wanted) else None
    image = None if glance_name else lifecycle.check_image(wanted)
    image_for = None
    if glance_name:
        from etcd_compute.scheduler.images import spec_image

        def image_for(held: dict[str, int]) -> dict[str, Any]:
            return spec_image(images_cli.glance_image(config, glance_name, held))
    groups = getattr(args, "groups", None)
    asked = lifecycle.Asked(hard=getattr(args, "hard", False), image_url=image,
                            resources=resources, revert=action == "revert-resize",
                            image_for=image_for,
                            security_groups=None if groups is None else
                            [] if groups == NO_GROUP else [groups])
    # In the zone that holds it (this one, or a zone below through its index), as destroy.
    with zones_cli.instance_zone(config, uuid) as zone:
        store = zone.store
        asked = lifecycle.request(store, zone.placement, uuid,
                                  "resize" if action == "revert-resize" else action,
                                  asked=asked)
        if not args.json:
            print(f"{action.upper()} REQUESTED FOR INSTANCE {uuid}", flush=True)
        if not args.wait:
            if args.json:
                output.emit_json({**asked.as_dict(), "outcome": "requested"})
            return 0
        outcome = lifecycle.wait(store, asked, config["scheduler"]["wait_timeout_seconds"],
                                 output.progress_of(args.json))
    if args.json:
        output.emit_json({**asked.as_dict(), "outcome": "done" if outcome.ok else "failed",
                          "record": outcome.record, "event": outcome.event})
    elif not outcome.ok:
        output.error(f"{action} of {uuid} failed: {outcome.error}")
    return 0 if outcome.ok else 1


def cmd_migrate(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """migrate UUID [--live] [--host HOST] [--verify] [--wait]."""
    from etcd_compute.errors import NoValidHost
    from etcd_compute.ops import migrations, operations
    from etcd_compute.scheduler.scheduler import Scheduler

    uuid = operations.check_uuid(args.uuid)
    with store_of(config) as store:
        placement = placement_of(config)
        scheduler = Scheduler(config, store=store, placement=placement)
        try:
            asked = migrations.migrate(store, placement, scheduler.place, uuid, args.live,
                                       args.host, verify=args.verify)
        except NoValidHost as exc:
            return output.no_valid_host(args.json, exc)
        if not args.json:
            print(f"{'LIVE ' if asked.live else ''}MIGRATION REQUESTED FOR INSTANCE {uuid} "
                  f"TO {terminal_line(asked.destination_name)}", flush=True)
        if not args.wait:
            if args.json:
                output.emit_json({**vars(asked), "outcome": "requested"})
            return 0

        def seen(instance: str, stage: str | None, record: dict[str, Any] | None) -> None:
            if not args.json:
                state = record["state"] if record else "gone"
                print(f"{instance} {state}" + (f" (move {stage})" if stage else ""),
                      flush=True)

        moved = migrations.wait(store, placement, asked,
                                config["scheduler"]["wait_timeout_seconds"], seen)
    if args.json:
        output.emit_json({**vars(asked), "outcome": "done" if moved.ok else "failed",
                          "host": moved.host, "record": moved.record, "event": moved.event})
    elif moved.awaiting:
        print(f"DEFINED ON {terminal_line(asked.destination_name)}, AWAITING "
              "migrate-confirm OR migrate-revert")
    elif moved.ok:
        print(f"MOVED TO {terminal_line(asked.destination_name)}: "
              f"{terminal_line((moved.event or {}).get('detail') or '')}")
    else:
        output.error(f"move of {uuid} failed: "
                     f"{(moved.event or {}).get('error') or 'it was given up'}")
    return 0 if moved.ok else 1


def cmd_migrate_abort(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import migrations, operations

    uuid = operations.check_uuid(args.uuid)
    with store_of(config) as store:
        stage = migrations.abort(store, uuid)
    if args.json:
        output.emit_json({"uuid": uuid, "was": stage, "outcome": "cancel requested"})
    else:
        print(f"MIGRATION OF {uuid} CALLED OFF (it was {stage}); the guest stays where it is")
    return 0


def cmd_migrate_verified(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """migrate-confirm UUID, migrate-revert UUID [--wait]: a cold move that awaits
    either."""
    from etcd_compute.ops import lifecycle, migrations, operations

    uuid = operations.check_uuid(args.uuid)
    with store_of(config) as store:
        placement = placement_of(config)
        if args.command == "migrate-confirm":
            there = migrations.confirm(store, placement, uuid)
            outcome, line = "confirmed", f"MIGRATION OF {uuid} CONFIRMED: ON {there}"
        else:
            start = lifecycle.revert_move(store, placement, uuid)
            outcome = "reverted"
            line = f"MIGRATION OF {uuid} REVERTED" + (
                ": STARTS AGAIN ONCE ITS DESTINATION DISCARDED ITS COPY" if start else "")
            if start is not None and args.wait:
                if not args.json:
                    print(terminal_line(line), flush=True)
                # The record followed, as any action's --wait: the controller writes the
                # start, the source's host runs it.
                done = lifecycle.wait(store, start, config["scheduler"]["wait_timeout_seconds"],
                                      output.progress_of(args.json))
                if args.json:
                    output.emit_json({**start.as_dict(), "outcome": "reverted" if done.ok
                                      else "failed", "record": done.record,
                                      "event": done.event})
                elif not done.ok:
                    output.error(f"revert of {uuid}: not started again: {done.error}")
                return 0 if done.ok else 1
    if args.json:
        output.emit_json({"uuid": uuid, "outcome": outcome})
    else:
        print(terminal_line(line), flush=True)
    return 0


def cmd_confirm(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """confirm-resize UUID: the held old size freed, the record forgets it."""
    from etcd_compute.ops import lifecycle, operations

    uuid = operations.check_uuid(args.uuid)
    with zones_cli.instance_zone(config, uuid) as zone:
        hold = lifecycle.confirm_resize(zone.store, zone.placement, uuid)
    if args.json:
        output.emit_json({"uuid": uuid, "outcome": "confirmed", "freed": hold})
    else:
        print(f"RESIZE CONFIRMED FOR INSTANCE {uuid}", flush=True)
    return 0


def cmd_events(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import lifecycle, operations

    uuid = operations.check_uuid(args.uuid)
    with zones_cli.instance_zone(config, uuid) as zone:
        found = lifecycle.instance_events(zone.store, uuid)
    if args.json:
        output.emit_json(found)
        return 0

    def took(event: dict[str, Any]) -> str:
        if not event.get("ended_at"):
            return "-"
        return f"{event['ended_at'] - event['started_at']:.1f}s"

    output.table([[output.when(e["started_at"]), e["action"], e["result"], e.get("by") or "-",
                   e.get("host_name") or e.get("host") or "-", took(e),
                   e.get("error") or e.get("detail") or "-"] for e in found],
                 ["STARTED", "ACTION", "RESULT", "BY", "HOST", "TOOK", "ERROR/DETAIL"])
    return 0
