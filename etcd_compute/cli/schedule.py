"""schedule.py / eschedule: place instances, and look after them.

    schedule.py 'resources=VCPU:1,MEMORY_MB:512,DISK_GB:1' [--count N] [--wait] ...
    schedule.py UUID                 state, host, IP, resources, error
    schedule.py destroy UUID         ask its host to destroy it
    schedule.py stop|start UUID      power it off (SHUTOFF) or on again
    schedule.py reboot [--hard] UUID restart its guest (asked first, or at once)
    schedule.py rebuild [--image URL] UUID   a fresh disk from its image (or URL), same
                                     uuid, IP, claim and host
    schedule.py resize QUERY UUID    a new size (resources=... only) on the same host
    schedule.py events UUID          what happened to it: action, who, host, when, result
    schedule.py list [--host H] [--state S] [--project P]   every instance (on host H, in
                                     state S, of project P)
    schedule.py hosts                every provider: capacity, usage, alive
    schedule.py console UUID [--follow]  the guest's serial console (tail; --follow: as it grows)
    schedule.py serve                the controller (leader-elected): reschedules failed builds,
                                     recovers the instances of dead hosts
    schedule.py api                  the compute API (Nova's v2.1, behind Keystone; see
                                     etcd_compute/api/)
    schedule.py host disable|enable HOST [--reason TEXT]   maintenance
    schedule.py host show HOST       state, since when, instances, reason
    schedule.py host drain HOST      disable, then move every instance elsewhere
    schedule.py zone add|list|show|info|delete   child zones (see cli/zones.py)

The first positional argument is a query (it contains '='), an instance uuid,
or one of the subcommands. Exit status: 0 done, 1 no valid host / not found /
instance failed / action refused in its state / no room to resize / action
ended in error, 2 bad input or config, 3 etcd or Placement unreachable.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from etcd_compute import config as configuration
from etcd_compute import logs
from etcd_compute.cli import Parser, terminal_line, terminal_text
from etcd_compute.cli import zones as zones_cli
from etcd_compute.errors import EtcdComputeError, NoValidHost, UsageError

ACTIONS = ("stop", "start", "reboot", "rebuild", "resize")
SUBCOMMANDS = ("destroy", *ACTIONS, "events", "list", "hosts", "console", "serve", "api",
               "host", "zone")
HOST_ACTIONS = ("disable", "enable", "show", "drain")
EXAMPLES = """\
examples:
  schedule.py 'resources=VCPU:1,MEMORY_MB:512,DISK_GB:1' --wait
  schedule.py 'resources=VCPU:1,MEMORY_MB:256&required=!CUSTOM_SLOW' --count 3 \\
      --hint anti-affinity=web
  schedule.py 'resources=VCPU:1,MEMORY_MB:256' --zone <aggregate uuid>
  schedule.py 'resources=VCPU:1,MEMORY_MB:256' --count 20 --zone lab2
  schedule.py zone add lab2 --etcd 10.1.0.1:2379 --placement https://10.1.0.1:8080 \\
      --ca-cert lab2/ca.crt --cert lab2/operator.crt --cert-key lab2/operator.key
  schedule.py zone list
  schedule.py d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py destroy d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py stop d578fb7c-7787-4e73-b69a-a7b3ef9bf73a --wait
  schedule.py resize 'resources=VCPU:2,MEMORY_MB:1024,DISK_GB:2' d578fb7c-... --wait
  schedule.py events d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py list --host hv1 --state error
  schedule.py console d578fb7c-7787-4e73-b69a-a7b3ef9bf73a --follow

query keys (Placement's GET /allocation_candidates syntax, microversion 1.39):
  resources=RC:N,...   required=T,!T  required=in:T1,T2   member_of=AGG|in:A,B|!AGG
  in_tree=RP   granular groups: resources1=..&required1=..   group_policy=none|isolate
  limit=N      (join with &, quote the whole query for the shell)
--zone AGG (a uuid) is member_of=AGG: a Placement aggregate as availability zone; a
compute joins one with compute.aggregates in compute.yaml. --zone NAME or a/b: that child
zone (another installation, see zone add) and those below it; --zone <this zone's name>:
only this zone's own hosts.
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(
        prog="schedule.py",
        description="Schedule instances onto compute hosts via Placement and etcd; "
                    "show, list and destroy them.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("words", nargs="*", metavar="QUERY|UUID|COMMAND",
                        help="a query (resources=...), an instance uuid, or destroy|stop|start|"
                             "reboot|rebuild|events UUID | resize QUERY UUID | list | hosts | "
                             "console UUID | serve | api")
    parser.add_argument("--config", metavar="PATH",
                        help="schedule.yaml to use (default: ./schedule.yaml if present)")
    parser.add_argument("--image", metavar="URL", help="image to boot (http(s):// or file://); "
                        "rebuild: the new image (default: the one it has)")
    parser.add_argument("--hard", action="store_true",
                        help="reboot: power the guest off at once instead of asking it first")
    parser.add_argument("--count", type=int, default=1, metavar="N",
                        help="place N instances, all or nothing (default 1)")
    parser.add_argument("--name", help="instance name (NAME-1..NAME-N with --count)")
    parser.add_argument("--user-data", metavar="FILE", help="cloud-init user data file")
    parser.add_argument("--key", metavar="FILE", help="ssh public key file for the guest")
    parser.add_argument("--zone", metavar="AZ|ZONE",
                        help="an aggregate uuid (member_of), or a child zone NAME or PATH "
                             "(a/b) to place in, or this zone's name (its own hosts only)")
    parser.add_argument("--hint", action="append", default=[], metavar="POLICY=GROUP",
                        help="server group: affinity=GROUP or anti-affinity=GROUP")
    parser.add_argument("--on-host-failure", choices=["rebuild", "error"],
                        help="when its host dies: rebuild it elsewhere from its image (its "
                             "local disk is lost) or end it in ERROR (default: "
                             "scheduler.on_host_failure)")
    parser.add_argument("--reason", help="host disable: why (shown by host show)")
    parser.add_argument("--wait", action="store_true",
                        help="follow the instances until ACTIVE or ERROR (destroy: DELETED; "
                             "an action: until its host has done it)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--host", metavar="HOST",
                        help="list: only instances on this host (its name or provider uuid)")
    parser.add_argument("--state", metavar="STATE",
                        help="list: only instances in this state (active, error...; any case)")
    parser.add_argument("--project", metavar="PROJECT_ID",
                        help="list: only instances of this project (a Keystone project id; "
                             "schedule.py's own are scheduler.project_id's)")
    parser.add_argument("--follow", "-f", action="store_true",
                        help="console: keep printing what the guest writes, until Ctrl-C or "
                             "the instance is gone")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    zones_cli.add_arguments(parser)
    return parser.parse_intermixed_args(argv)


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


# ----------------------------------------------------------------- output


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def _table(rows: list[list[str]], header: list[str]) -> None:
    rows = [[terminal_line(str(cell)) for cell in row] for row in rows]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=False)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths,
                                                                  strict=False)).rstrip())


def _resources_text(resources: dict[str, int] | None) -> str:
    return ",".join(f"{rc}:{n}" for rc, n in sorted((resources or {}).items())) or "-"


def _when(timestamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(timestamp)) if timestamp else "-"


def _progress(uuid: str, record: dict[str, Any] | None) -> None:
    if record is None:
        print(f"{uuid} GONE", flush=True)
        return
    detail = {"ACTIVE": f"ip={record.get('ip') or '-'}",
              "ERROR": f"error={record.get('error') or '-'}"}.get(record["state"], "")
    where = record.get("host_name") or record.get("host") or "-"
    print(terminal_line(f"{uuid} {record['state']} on {where} {detail}".rstrip()), flush=True)


# ----------------------------------------------------------------- commands


def _no_valid_host(args: argparse.Namespace, exc: NoValidHost) -> int:
    """NO ALLOCATIONS LEFT, then one reason a line (exit status 1)."""
    if args.json:
        _emit_json({"error": str(exc), "reasons": exc.reasons})
    else:
        print(str(exc))
        for reason in exc.reasons:
            print(terminal_line(reason))
    return 1


def cmd_schedule(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """Place the instances: through the scheduler service when one runs (the queue in
    etcd), else here; the same output and exit status either way."""
    from etcd_compute.scheduler.spec import RequestSpec

    aggregate, route = zones_cli.zone_option(args.zone, config)
    request_spec = RequestSpec.build(
        args.words[0], count=args.count, name=args.name, image_url=args.image,
        user_data=_read_file("--user-data", args.user_data),
        ssh_key=_read_file("--key", args.key), group=_group(args.hint), zone=aggregate,
        required_resources=config["scheduler"]["required_resources"],
        on_host_failure=args.on_host_failure,
    )
    with _store(config) as store:
        # A request for child zones goes there directly, never through this zone's service.
        if zones_cli.federated(store, route):
            return _federate(args, config, store, request_spec, route)
        try:
            destinations, conflicts = _select(config, store, request_spec)
        except NoValidHost as exc:
            return _no_valid_host(args, exc)
        if args.json and not args.wait:
            _emit_json({"instances": [d.as_dict() for d in destinations],
                        "conflicts": conflicts})
        elif not args.json:
            for destination in destinations:
                print(f"NOTIFIED TARGET, {destination.host}, OF INSTANCE {destination.uuid}",
                      flush=True)
        if not args.wait:
            return 0
        from etcd_compute import instances
        from etcd_compute.scheduler import operations as ops

        final = ops.wait(store, [d.uuid for d in destinations],
                         frozenset({instances.ACTIVE, instances.ERROR, instances.DELETED}),
                         config["scheduler"]["wait_timeout_seconds"],
                         (lambda *_: None) if args.json else _progress)
        if args.json:
            _emit_json({"instances": [{**d.as_dict(), "record": final.get(d.uuid)}
                                      for d in destinations],
                        "conflicts": conflicts})
        ok = all(r is not None and r["state"] == instances.ACTIVE for r in final.values())
        return 0 if ok else 1


def _federate(args: argparse.Namespace, config: dict[str, Any], store: Any,
              request_spec: Any, route: str | None) -> int:
    """A request across zones (cli/zones.py), planned here and in the zones below."""
    from etcd_compute.scheduler.scheduler import Scheduler

    scheduler = Scheduler(config, store=store)
    try:
        return zones_cli.schedule(args, config, scheduler, request_spec, route,
                                  lambda exc: _no_valid_host(args, exc), _progress)
    finally:
        scheduler.close()


def _select(config: dict[str, Any], store: Any, request_spec: Any) -> tuple[list[Any], int]:
    """(destinations, Placement 409s met on the way): the service's answer when a service
    takes requests, else our own scheduling (imported only then: the queue's path needs
    no Placement client)."""
    if config["scheduler"]["use_service"]:
        from etcd_compute.scheduler.queue_client import QueueClient

        client = QueueClient(store, config["scheduler"])
        destinations = client.schedule(request_spec)
        if destinations is not None:
            return destinations, client.conflicts
    from etcd_compute.scheduler.scheduler import Scheduler

    scheduler = Scheduler(config, store=store)
    try:
        return scheduler.select_destinations(request_spec), scheduler.placement.conflicts
    finally:
        scheduler.close()


def _store(config: dict[str, Any]) -> Any:
    """An etcd Store, used as `with _store(config) as store:` (closed afterwards)."""
    from etcd_compute.etcd import Store

    return Store(config["etcd"])


def _placement(config: dict[str, Any]) -> Any:
    from etcd_compute.placement import PlacementClient

    return PlacementClient(config["placement"])


def cmd_show(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import operations as ops

    with zones_cli.instance_zone(config, args.words[0]) as zone:
        record = ops.show(zone.store, args.words[0])
    if zone.path:
        record = {**record, "zone": zone.path}
    if args.json:
        _emit_json(record)
        return 0
    host = record.get("host_name") or "-"
    if record.get("host"):
        host = f"{host} ({record['host']})"
    task = record.get("task")  # the action running now, and who asked for it
    state = record["state"] if not task else (
        f"{record['state']} ({task.get('action') or 'action'} asked by "
        f"{task.get('by') or '-'} at {_when(task.get('at'))})")
    rows = [["uuid", record["uuid"]], ["name", record.get("name") or "-"],
            ["state", state], ["host", host], ["ip", record.get("ip") or "-"],
            ["resources", _resources_text(record.get("resources"))],
            ["image", record.get("image") or "-"], ["group", record.get("group") or "-"],
            ["error", record.get("error") or "-"], ["created", _when(record.get("created_at"))],
            ["updated", _when(record.get("updated_at"))],
            *([["zone", record["zone"]]] if record.get("zone") else [])]
    for key, value in rows:
        print(f"{key:<10} {terminal_line(str(value))}")
    return 0


def cmd_destroy(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute import instances
    from etcd_compute.scheduler import operations as ops

    if len(args.words) != 2:
        raise UsageError("destroy: expected exactly one instance uuid")
    uuid = ops.check_uuid(args.words[1])
    with zones_cli.instance_zone(config, uuid) as zone:
        store = zone.store
        outcome = ops.destroy(store, zone.placement, uuid)
        messages_by_outcome = {
            "requested": f"DESTROY REQUESTED FOR INSTANCE {uuid}",
            "already": f"DESTROY ALREADY REQUESTED FOR INSTANCE {uuid}",
            "removed": f"REMOVED INSTANCE {uuid} (no host held it; record and claim removed)",
            "deleted": f"INSTANCE {uuid} IS ALREADY DELETED",
            "finished": f"DELETED INSTANCE {uuid} (its host is down: claim freed here; the "
                        "host cleans up if it returns)",
        }
        if args.wait and outcome in ("requested", "already"):
            ops.wait(store, [uuid], frozenset({instances.DELETED}),
                     config["scheduler"]["wait_timeout_seconds"],
                     (lambda *_: None) if args.json else _progress)
        if args.json:
            _emit_json({"uuid": uuid, "outcome": outcome})
        else:
            print(messages_by_outcome[outcome])
        return 0


def cmd_action(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """stop|start|reboot|rebuild UUID, resize QUERY UUID."""
    from etcd_compute.scheduler import lifecycle
    from etcd_compute.scheduler import operations as ops

    action = args.words[0]
    wanted = 3 if action == "resize" else 2
    if len(args.words) != wanted:
        raise UsageError("resize: expected QUERY UUID" if action == "resize"
                         else f"{action}: expected exactly one instance uuid")
    uuid = ops.check_uuid(args.words[-1])
    resources = (lifecycle.resize_request(args.words[1],
                                          config["scheduler"]["required_resources"])
                 if action == "resize" else None)
    image = lifecycle.check_image(args.image)
    # In the zone that holds it (this one, or a zone below through its index), as destroy.
    with zones_cli.instance_zone(config, uuid) as zone:
        store = zone.store
        asked = lifecycle.request(store, zone.placement, uuid, action, hard=args.hard,
                                  image_url=image, resources=resources)
        if not args.json:
            print(f"{action.upper()} REQUESTED FOR INSTANCE {uuid}", flush=True)
        if not args.wait:
            if args.json:
                _emit_json({**asked.as_dict(), "outcome": "requested"})
            return 0
        outcome = lifecycle.wait(store, asked, config["scheduler"]["wait_timeout_seconds"],
                                 (lambda *_: None) if args.json else _progress)
    if args.json:
        _emit_json({**asked.as_dict(), "outcome": "done" if outcome.ok else "failed",
                    "record": outcome.record, "event": outcome.event})
    elif not outcome.ok:
        print(terminal_line(f"schedule.py: error: {action} of {uuid} failed: {outcome.error}"),
              file=sys.stderr)
    return 0 if outcome.ok else 1


def cmd_events(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import lifecycle
    from etcd_compute.scheduler import operations as ops

    if len(args.words) != 2:
        raise UsageError("events: expected exactly one instance uuid")
    with zones_cli.instance_zone(config, ops.check_uuid(args.words[1])) as zone:
        found = lifecycle.instance_events(zone.store, args.words[1])
    if args.json:
        _emit_json(found)
        return 0

    def took(event: dict[str, Any]) -> str:
        if not event.get("ended_at"):
            return "-"
        return f"{event['ended_at'] - event['started_at']:.1f}s"

    _table([[_when(e["started_at"]), e["action"], e["result"], e.get("by") or "-",
             e.get("host_name") or e.get("host") or "-", took(e),
             e.get("error") or e.get("detail") or "-"] for e in found],
           ["STARTED", "ACTION", "RESULT", "BY", "HOST", "TOOK", "ERROR/DETAIL"])
    return 0


def cmd_list(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import operations as ops

    if args.state is not None:
        ops.check_state(args.state)  # before any connection
    with zones_cli.zone_tree(config) as tree:
        found, unreachable = zones_cli.list_instances(tree, args.host, args.state)
    if args.project is not None:
        found = [r for r in found if r.get("project_id") == args.project]
    for zone, reason in unreachable.items():
        print(f"schedule.py: zone {terminal_line(zone)} unreachable, its instances not listed: "
              f"{terminal_line(reason)}", file=sys.stderr)
    if args.json:
        _emit_json(found)
        return 0
    zoned = any("zone" in r for r in found) or bool(unreachable)
    _table([[r["uuid"], r.get("name") or "-", r["state"], r.get("host_name") or "-",
             r.get("ip") or "-", _resources_text(r.get("resources")),
             *([r.get("zone", "-")] if zoned else [])] for r in found],
           ["UUID", "NAME", "STATE", "HOST", "IP", "RESOURCES", *(["ZONE"] if zoned else [])])
    return 0


def cmd_hosts(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import operations as ops

    with _store(config) as store:
        found = ops.hosts(store, _placement(config))
    if args.json:
        _emit_json(found)
        return 0
    classes = sorted({rc for h in found for rc in h["resources"]})

    def usage(host: dict[str, Any], rc: str) -> str:
        r = host["resources"].get(rc)
        return f"{r['used']}/{r['capacity']}" if r else "-"

    _table([[h["name"], h["uuid"], "yes" if h["alive"] else "NO",
             "DISABLED" if h["disabled"] else "enabled", str(h["instances"]),
             *(usage(h, rc) for rc in classes)] for h in found],
           ["NAME", "UUID", "ALIVE", "STATUS", "INSTANCES", *(f"{rc} used/cap" for rc in classes)])
    return 0


def cmd_console(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import operations as ops

    if len(args.words) != 2:
        raise UsageError("console: expected exactly one instance uuid")
    if args.follow:
        return _follow_console(args, config)
    with zones_cli.instance_zone(config, ops.check_uuid(args.words[1])) as zone:
        text = ops.console(zone.store, args.words[1])
    if args.json:
        _emit_json({"uuid": args.words[1], "text": text})
    else:
        # A guest writes its console: what it prints must not drive our terminal.
        text = terminal_text(text)
        sys.stdout.write(text if text.endswith("\n") or not text else text + "\n")
    return 0


def cmd_host(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler import maintenance

    if len(args.words) != 3 or args.words[1] not in HOST_ACTIONS:
        raise UsageError(f"host: expected host {'|'.join(HOST_ACTIONS)} HOST")
    action, host = args.words[1], args.words[2]
    with _store(config) as store:
        placement = _placement(config)
        if action == "show":
            shown = maintenance.show(store, placement, host)
            if args.json:
                _emit_json(shown)
                return 0
            reason = shown["maintenance"] or {}
            rows = [["name", shown["name"]], ["uuid", shown["uuid"]], ["state", shown["state"]],
                    ["up since", _when(shown["up_since"])],
                    ["disabled", f"since {_when(reason.get('since'))} by {reason.get('by')}: "
                                 f"{reason.get('reason') or '-'}" if reason else "no"],
                    ["instances", str(len(shown["instances"]))]]
            for key, value in rows:
                print(terminal_line(f"{key:<10} {value}"))
            for instance in shown["instances"]:
                print(terminal_line(f"  {instance['uuid']} {instance['state']} "
                                    f"{instance['name'] or '-'}"))
            return 0
        if action == "drain":
            from etcd_compute.scheduler.scheduler import Scheduler

            summary = maintenance.drain(
                store, placement, host, config["scheduler"]["wait_timeout_seconds"],
                (lambda _line: None) if args.json else
                (lambda line: print(terminal_line(line), flush=True)),
                place=Scheduler(config, store=store, placement=placement).place)
            if args.json:
                _emit_json(summary)
            else:
                print("DRAINED " + ", ".join(f"{n} {what}" for what, n in summary.items()))
            return 0
        done = (maintenance.disable(store, placement, host, args.reason) if action == "disable"
                else maintenance.enable(store, placement, host))
        if args.json:
            _emit_json({"uuid": done["uuid"], "name": done["name"], "action": action})
        else:
            print(f"HOST {terminal_line(done['name'])} ({done['uuid']}) "
                  f"{action.upper()}D")
        return 0


class TerminalSink:
    """A console follow for a terminal: the guest's text escaped (it must not drive our
    terminal), our own lines on lines of their own, notes on stderr."""

    def __init__(self) -> None:
        self.at_line_start = True

    def _write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()
        self.at_line_start = text.endswith("\n")

    def _line(self, line: str) -> None:
        self._write(("" if self.at_line_start else "\n") + terminal_line(line) + "\n")

    def text(self, text: str) -> None:
        self._write(terminal_text(text))

    def restarted(self) -> None:
        from etcd_compute.scheduler.console_follow import RESTARTED

        self._line(RESTARTED)

    def ended(self, status: int, line: str) -> None:
        self._line(line)

    def note(self, line: str) -> None:
        print(f"schedule.py: {terminal_line(line)}", file=sys.stderr, flush=True)


class JsonSink:
    """A console follow as JSON lines: {"uuid", "text", "restarted"} per update, then
    {"uuid", "end", "status"}; notes on stderr."""

    def __init__(self, uuid: str):
        self.uuid, self.restart = uuid, False

    def _emit(self, data: dict[str, Any]) -> None:
        print(json.dumps({"uuid": self.uuid, **data}, sort_keys=True), flush=True)

    def text(self, text: str) -> None:
        self._emit({"text": text, "restarted": self.restart})
        self.restart = False

    def restarted(self) -> None:
        self.restart = True

    def ended(self, status: int, line: str) -> None:
        self._emit({"end": line, "status": status})

    def note(self, line: str) -> None:
        print(f"schedule.py: {terminal_line(line)}", file=sys.stderr, flush=True)


def _follow_console(args: argparse.Namespace, config: dict[str, Any]) -> int:
    """`console UUID --follow`: until Ctrl-C/SIGTERM (0) or the instance is gone."""
    import signal
    import threading

    from etcd_compute.scheduler.console_follow import ConsoleFollower
    from etcd_compute.scheduler.operations import check_uuid

    uuid = check_uuid(args.words[1])
    stopping = threading.Event()
    previous = {number: signal.signal(number, lambda *_: stopping.set())
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        with zones_cli.instance_zone(config, uuid) as zone:
            sink = JsonSink(uuid) if args.json else TerminalSink()
            return ConsoleFollower(zone.store, uuid, sink, stopping).run()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def cmd_serve(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.scheduler.serve import ControllerService

    return ControllerService(config).run()


def cmd_api(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.api.serve import serve

    return serve(config)


def dispatch(args: argparse.Namespace) -> int:
    from etcd_compute.scheduler.request import UUID

    if not args.words:
        raise UsageError("nothing to do: give a query (resources=...), an instance uuid, or "
                         "destroy|stop|start|reboot|rebuild|resize|events|list|hosts|console|"
                         "serve|api|host|zone; see --help")
    first = args.words[0]
    config = configuration.load_schedule(args.config)
    # A daemon reports what it does; a command only what went wrong.
    default_level = "INFO" if first in ("serve", "api") else config["logging"]["level"]
    logs.setup(args.log_level or default_level)
    if (args.host is not None or args.state is not None or args.project is not None) \
            and first != "list":
        raise UsageError("--host, --state and --project go with list")
    if args.follow and first != "console":
        raise UsageError("--follow goes with console")
    if args.hard and first != "reboot":
        raise UsageError("--hard goes with reboot")
    if args.image is not None and first in SUBCOMMANDS and first != "rebuild":
        raise UsageError("--image goes with a query or rebuild")
    zones_cli.check_options(args)
    if first in SUBCOMMANDS:
        if first in ("list", "hosts", "serve", "api") and len(args.words) != 1:
            raise UsageError(f"{first}: takes no arguments")
        if first == "zone":
            return zones_cli.cmd_zone(args, config, _table)
        command = {"destroy": cmd_destroy, "list": cmd_list, "hosts": cmd_hosts,
                   "console": cmd_console, "serve": cmd_serve, "api": cmd_api,
                   "host": cmd_host,
                   "events": cmd_events, **dict.fromkeys(ACTIONS, cmd_action)}[first]
        return command(args, config)
    if len(args.words) != 1:
        raise UsageError(f"unexpected argument {args.words[1]!r} (quote the query; "
                         "join its parts with &)")
    if UUID.match(first):
        return cmd_show(args, config)
    if "=" in first:
        return cmd_schedule(args, config)
    raise UsageError(f"{first!r} is not a query (resources=...), an instance uuid, or one of "
                     + ", ".join(SUBCOMMANDS))


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        return dispatch(args)
    except EtcdComputeError as exc:
        print(f"schedule.py: error: {terminal_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
