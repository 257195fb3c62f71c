"""schedule.py's host commands: hosts (every provider), host disable|enable|show|drain HOST.

    schedule.py hosts                          capacity, usage, alive, disabled, instances
    schedule.py host disable HOST [--reason TEXT]   skipped by the scheduler from now on
    schedule.py host enable HOST
    schedule.py host show HOST                 state, since when, instances, reason
    schedule.py host drain HOST                disable, then move every instance elsewhere

The work is in `ops/operations.py` (hosts) and `ops/maintenance.py`.
"""

from __future__ import annotations

import argparse
from typing import Any

from etcd_compute.cli import Commands, output, placement_of, store_of, terminal_line

HOST_ACTIONS = {
    "disable": "skip HOST when scheduling (its instances stay); --reason says why",
    "enable": "schedule onto HOST again",
    "show": "HOST's state, since when, who disabled it and why, its instances",
    "drain": "disable HOST, then move each of its instances elsewhere: live (the default; "
             "stopped ones cold), cold, or rebuilt from their images (--mode)",
}


def add_commands(commands: Commands) -> None:
    commands.add("hosts", "every provider: capacity, usage, alive, disabled, instances",
                 "takes no arguments", cmd_hosts)
    host = commands.group("host", "maintenance: host disable|enable|show|drain HOST",
                          f"expected host {'|'.join(HOST_ACTIONS)} HOST")
    for action, summary in HOST_ACTIONS.items():
        parser = host.add(action, summary, "expected one HOST (a name or provider uuid)",
                          cmd_host)
        parser.add_argument("host", metavar="HOST", help="a provider name or uuid")
        if action == "disable":
            parser.add_argument("--reason", help="why (shown by host show)")
        if action == "drain":
            parser.add_argument("--mode", choices=["live", "cold", "rebuild"], default="live",
                                help="live: running instances move running, their disks "
                                     "with them (stopped ones cold); cold: each stopped, "
                                     "copied, started there; rebuild: built again from its "
                                     "image elsewhere (its disk lost)")
            parser.add_argument("--parallel", type=int, default=2, metavar="N",
                                help="moves at once (live and cold; default 2)")


def cmd_hosts(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import operations

    with store_of(config) as store:
        found = operations.hosts(store, placement_of(config))
    if args.json:
        output.emit_json(found)
        return 0
    classes = sorted({rc for h in found for rc in h["resources"]})

    def usage(host: dict[str, Any], rc: str) -> str:
        r = host["resources"].get(rc)
        return f"{r['used']}/{r['capacity']}" if r else "-"

    output.table([[h["name"], h["uuid"], "yes" if h["alive"] else "NO",
                   "DISABLED" if h["disabled"] else "enabled", str(h["instances"]),
                   *(usage(h, rc) for rc in classes)] for h in found],
                 ["NAME", "UUID", "ALIVE", "STATUS", "INSTANCES",
                  *(f"{rc} used/cap" for rc in classes)])
    return 0


def cmd_host(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.ops import maintenance

    action, host = args.action, args.host
    with store_of(config) as store:
        placement = placement_of(config)
        if action == "show":
            return _show(args, maintenance.show(store, placement, host))
        if action == "drain":
            from etcd_compute.scheduler.scheduler import Scheduler

            summary = maintenance.drain(
                store, placement, host, config["scheduler"]["wait_timeout_seconds"],
                output.quiet if args.json else
                (lambda line: print(terminal_line(line), flush=True)),
                place=Scheduler(config, store=store, placement=placement).place,
                mode=args.mode, parallel=args.parallel)
            if args.json:
                output.emit_json(summary)
            else:
                print("DRAINED " + ", ".join(f"{n} {what}" for what, n in summary.items()))
            return 0
        done = (maintenance.disable(store, placement, host, args.reason) if action == "disable"
                else maintenance.enable(store, placement, host))
        if args.json:
            output.emit_json({"uuid": done["uuid"], "name": done["name"], "action": action})
        else:
            print(f"HOST {terminal_line(done['name'])} ({done['uuid']}) {action.upper()}D")
        return 0


def _show(args: argparse.Namespace, shown: dict[str, Any]) -> int:
    if args.json:
        output.emit_json(shown)
        return 0
    reason = shown["maintenance"] or {}
    rows = [["name", shown["name"]], ["uuid", shown["uuid"]], ["state", shown["state"]],
            ["up since", output.when(shown["up_since"])],
            ["disabled", f"since {output.when(reason.get('since'))} by {reason.get('by')}: "
                         f"{reason.get('reason') or '-'}" if reason else "no"],
            ["instances", str(len(shown["instances"]))]]
    for key, value in rows:
        print(terminal_line(f"{key:<10} {value}"))
    for instance in shown["instances"]:
        print(terminal_line(f"  {instance['uuid']} {instance['state']} "
                            f"{instance['name'] or '-'}"))
    return 0
