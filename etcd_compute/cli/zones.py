"""schedule.py's zone commands, and requests and instance commands across zones.

    schedule.py zone add NAME --etcd HOST:PORT[,...] --placement URL
                         [--etcd-prefix P] [--ca-cert F --cert F --cert-key F] [--timeout S]
    schedule.py zone list               every zone below this one: reachable, capabilities
    schedule.py zone show NAME|PATH     its record, and the capabilities of it and below
    schedule.py zone info [NAME|PATH]   capabilities of this zone (or that one) and below
    schedule.py zone delete NAME [--force]

The seed's `nova zone-add <url> <user> <key>`, `zone-list`, `zone-info` and
`zone-delete <N>`, with endpoints and credential files instead of an API URL
and key. Thin: the work is in `etcd_compute.zones`. Also what the other commands
need of zones: --zone's meanings, the zone holding an instance, a request across
zones, a list across zones.
"""

from __future__ import annotations

import argparse
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from etcd_compute.cli import Commands, output, terminal_line
from etcd_compute.errors import NotFound, UsageError
from etcd_compute.keys import UUID

ZONE_ACTIONS = {
    "add": "record a child zone: its etcd and Placement, and the credential files for them",
    "list": "every zone below this one: reachable, capabilities",
    "show": "a zone's record, and the capabilities of it and those below",
    "info": "the capabilities of this zone (or NAME|PATH) and those below",
    "delete": "forget a child zone (--force: even while it holds instances placed from here)",
}


def add_commands(commands: Commands) -> None:
    zone = commands.group("zone", "child zones: zone add|list|show|info|delete",
                          f"expected zone {'|'.join(ZONE_ACTIONS)}")
    add = zone.add("add", ZONE_ACTIONS["add"], "expected a NAME", _add)
    add.add_argument("name", metavar="NAME")
    add.add_argument("--etcd", metavar="HOST:PORT[,HOST:PORT]",
                     help="the child zone's etcd members (required)")
    add.add_argument("--etcd-prefix", metavar="PREFIX", help="its etcd.prefix (default none)")
    add.add_argument("--placement", metavar="URL", help="its Placement endpoint (required)")
    add.add_argument("--ca-cert", metavar="FILE", help="its cluster CA")
    add.add_argument("--cert", metavar="FILE",
                     help="a client certificate its etcd (operator role) and Placement accept")
    add.add_argument("--cert-key", metavar="FILE", help="that certificate's key (mode 0600)")
    add.add_argument("--timeout", type=float, metavar="SECONDS",
                     help="how long to wait on its etcd and Placement (default 5 and 30)")
    zone.add("list", ZONE_ACTIONS["list"], "expected no argument", _list)
    show = zone.add("show", ZONE_ACTIONS["show"], "expected one NAME or PATH", _show)
    show.add_argument("name", metavar="NAME|PATH")
    info = zone.add("info", ZONE_ACTIONS["info"], "expected at most one NAME or PATH", _info)
    info.add_argument("name", metavar="NAME|PATH", nargs="?")
    delete = zone.add("delete", ZONE_ACTIONS["delete"], "expected one NAME", _delete)
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--force", action="store_true",
                        help="even while it holds instances placed from here")


def zone_option(value: str | None, config: dict[str, Any]) -> tuple[str | None, str | None]:
    """--zone: (aggregate uuid, None) as before zones, or (None, route): "" for this zone
    alone (its own name), "a" or "a/b" for that zone and those below it."""
    from etcd_compute.zones import registry

    if value is None:
        return None, None
    if UUID.match(value):
        return value, None
    if value == config["zones"]["name"]:
        return None, ""
    try:
        registry.parse_path(value)
    except UsageError:
        raise UsageError(f"--zone {value[:100]!r}: expected an aggregate uuid, this zone's "
                         "name, or a zone below it (a, a/b)") from None
    return None, value


@contextlib.contextmanager
def zone_tree(config: dict[str, Any], scheduler: Any = None) -> Iterator[Any]:
    """This zone and those below it, everything closed afterwards."""
    from etcd_compute.scheduler import Scheduler
    from etcd_compute.zones.tree import ZoneTree

    local = scheduler or Scheduler(config)
    tree = ZoneTree(config, local)
    try:
        yield tree
    finally:
        tree.close()
        if scheduler is None:
            local.close()


@contextlib.contextmanager
def instance_zone(config: dict[str, Any], uuid: str) -> Iterator[Any]:
    """The zone holding `uuid` (this one if it knows it, or nobody does); an index entry
    whose zone no longer has it is forgotten when the body says NotFound."""
    from etcd_compute.zones import lookup

    with zone_tree(config) as tree:
        zone = lookup.zone_of(tree, uuid)
        try:
            yield zone
        except NotFound:
            if zone is not tree.root:
                lookup.forget(tree, uuid)
            raise


def list_instances(tree: Any, host: str | None, state: str | None
                   ) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """`list` in every zone from here down: the records, and the zones not listed (why)."""
    from etcd_compute.zones import lookup

    return lookup.list_all(tree, host, state)


def federated(store: Any, route: str | None) -> bool:
    """Whether a request goes across zones: a route below here, or any zone recorded (one
    keys-only read of this zone's etcd)."""
    if route is not None:
        return route != ""
    entries, _ = store.get_prefix(store.keys.zones(), keys_only=True)
    return bool(entries)


def schedule(args: argparse.Namespace, config: dict[str, Any], scheduler: Any,
             request_spec: Any, route: str | None) -> int:
    """A request across zones, printed as a request in one zone is (plus each zone)."""
    from etcd_compute.errors import NoValidHost
    from etcd_compute.instances import states
    from etcd_compute.ops import operations as ops
    from etcd_compute.zones.federation import Federation, in_parallel

    with zone_tree(config, scheduler) as tree:
        federation = Federation(tree)
        try:
            placed = federation.select_destinations(request_spec, route)
        except NoValidHost as exc:
            return output.no_valid_host(args.json, exc)
        if args.json and not args.wait:
            output.emit_json({"instances": [p.as_dict() for p in placed],
                        "conflicts": federation.conflicts, "replans": federation.replans})
        elif not args.json:
            for one in placed:
                where = f" IN ZONE {one.zone}" if one.zone else ""
                print(f"NOTIFIED TARGET, {one.destination.host}, OF INSTANCE "
                      f"{one.destination.uuid}{where}", flush=True)
        if not args.wait:
            return 0
        lock = threading.Lock()

        def changed(uuid: str, record: Any) -> None:
            with lock:
                output.progress(uuid, record)

        by_zone: dict[str, list[str]] = {}
        for one in placed:
            by_zone.setdefault(one.zone, []).append(one.destination.uuid)
        finals, failed = in_parallel(list(by_zone), lambda path: ops.wait(
            tree.find(path).store, by_zone[path],
            frozenset({states.ACTIVE, states.ERROR, states.DELETED}),
            config["scheduler"]["wait_timeout_seconds"],
            output.quiet if args.json else changed))
        if failed:
            raise next(iter(failed.values()))
        final = {uuid: record for records in finals.values() for uuid, record in records.items()}
        if args.json:
            output.emit_json({"instances": [{**p.as_dict(),
                                             "record": final.get(p.destination.uuid)}
                                      for p in placed],
                        "conflicts": federation.conflicts, "replans": federation.replans})
        ok = all(r is not None and r["state"] == states.ACTIVE for r in final.values())
        return 0 if ok else 1


# --------------------------------------------------------------------- zone ...


def _add(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.zones import registry
    from etcd_compute.zones.tree import ZONE_FAULTS

    name = registry.check_name(args.name, "zone add")
    if name == config["zones"]["name"]:
        raise UsageError(f"zone add {name}: that is this zone's own name (zones.name)")
    if not args.etcd or not args.placement:
        raise UsageError("zone add: --etcd and --placement are required")
    entry = registry.record(
        name, [e.strip() for e in args.etcd.split(",") if e.strip()], args.etcd_prefix or "",
        args.placement, args.ca_cert, args.cert, args.cert_key, args.timeout)
    if registry.identity(registry.client_config(config, entry)) == registry.identity(config):
        raise UsageError(f"zone add {name}: that is this zone's own etcd and prefix")
    with zone_tree(config) as tree:
        registry.add(tree.root.store, entry)
        try:
            zone = tree.find(name)
            from etcd_compute.zones import info

            reach = "reachable: " + info.brief(info.describe(zone))
        except ZONE_FAULTS as exc:
            reach = f"not reachable now: {exc}"
    if args.json:
        output.emit_json({"zone": name, "reachable": reach.startswith("reachable"),
                          "detail": reach})
    else:
        print(terminal_line(f"ZONE {name} ADDED ({reach})"))
    return 0


def _summaries(config: dict[str, Any], route: str | None) -> tuple[Any, dict[str, Any]]:
    from etcd_compute.zones import info, journal

    with zone_tree(config) as tree:
        journal.sweep(tree, config["zones"]["intent_grace_seconds"])
        found = info.info(tree, route)
        records = {zone.label: zone.entry for zone in tree.known() if zone.entry}
    return found, records


def _list(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.zones import info

    found, records = _summaries(config, None)
    below = {label: s for label, s in found["zones"].items() if label != found["name"]}
    names = sorted(set(below) | set(found["unreachable"]) - {found["name"]})
    rows = []
    for label in names:
        entry = records.get(label) or {}
        reachable = label in below
        rows.append({"name": label, "reachable": reachable,
                     "reason": None if reachable else found["unreachable"].get(label),
                     "capabilities": below.get(label),
                     "etcd": ",".join(entry.get("etcd", {}).get("endpoints", [])) or "-",
                     "placement": entry.get("placement", {}).get("endpoint", "-")})
    if args.json:
        output.emit_json(rows)
        return 0
    # The widest column last: the capabilities, or why the zone cannot be reached.
    output.table([[r["name"], "yes" if r["reachable"] else "NO", r["etcd"], r["placement"],
            info.brief(r["capabilities"]) if r["capabilities"] else r["reason"] or "-"]
           for r in rows],
          ["NAME", "REACHABLE", "ETCD", "PLACEMENT", "CAPABILITIES (OR WHY NOT)"])
    return 0


def _print_info(found: dict[str, Any]) -> None:
    from etcd_compute.zones import info

    below = [label for label in found["zones"] if label != found["name"]]
    output.rows([("name", found["name"]),
                 ("zones", ", ".join(sorted(found["zones"])) or "-"),
                 ("unreachable", "; ".join(f"{z}: {why}"
                                           for z, why in found["unreachable"].items()) or "-"),
                 *info.capabilities(found["total"])])
    if below:
        print()
        for label, summary in found["zones"].items():
            print(terminal_line(f"{label}: {info.brief(summary)}"))


def _info(args: argparse.Namespace, config: dict[str, Any]) -> int:
    found, _ = _summaries(config, args.name)
    if args.json:
        output.emit_json(found)
    else:
        _print_info(found)
    return 0


def _show(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.zones import registry

    registry.parse_path(args.name, "zone show")
    found, records = _summaries(config, args.name)
    entry = records.get(args.name)
    if entry is None and args.name not in found["unreachable"]:
        raise NotFound(f"no zone {args.name} (see zone list)")
    if args.json:
        output.emit_json({**found, "record": entry})
        return 0
    if entry is not None:
        files = ", ".join(f"{k}={entry['etcd'].get(k)}" for k in registry.TLS_FILES
                          if entry["etcd"].get(k)) or "none (plain TCP)"
        output.rows([("etcd", f"{','.join(entry['etcd']['endpoints'])} prefix "
                              f"{entry['etcd']['prefix'] or '-'}"),
                     ("placement", entry["placement"]["endpoint"]),
                     ("credentials", files),
                     ("timeouts", f"etcd {entry['etcd']['timeout']:g} s, Placement "
                                  f"{entry['placement']['timeout']:g} s")])
    _print_info(found)
    return 0


def _still_there(zone: Any, uuid: str) -> bool:
    from etcd_compute.ops import operations as ops

    try:
        ops.show(zone.store, uuid)
    except NotFound:
        return False
    return True


def _delete(args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.zones import lookup, registry
    from etcd_compute.zones.tree import ZONE_FAULTS

    name = registry.check_name(args.name, "zone delete")
    with zone_tree(config) as tree:
        store = tree.root.store
        placed = registry.count_placed(store, name)
        if placed and not args.force:
            # Before refusing, forget what the zone no longer has (destroyed there).
            with contextlib.suppress(*ZONE_FAULTS, UsageError):
                for uuid in placed:
                    if not _still_there(tree.find(lookup.indexed(tree, uuid) or name), uuid):
                        lookup.forget(tree, uuid)
        forgotten = registry.delete(store, name, args.force)
    if args.json:
        output.emit_json({"zone": name, "deleted": True, "forgotten_instances": forgotten})
    else:
        print(f"ZONE {name} DELETED" + (f" ({len(forgotten)} instance(s) placed there "
                                        "forgotten here; they keep running)" if forgotten
                                        else ""))
    return 0
