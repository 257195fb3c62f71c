"""schedule.py's zone commands, and requests and instance commands across zones.

    schedule.py zone add NAME --etcd HOST:PORT[,...] --placement URL
                         [--etcd-prefix P] [--ca-cert F --cert F --cert-key F] [--timeout S]
    schedule.py zone list               every zone below this one: reachable, capabilities
    schedule.py zone show NAME|PATH     its record, and the capabilities of it and below
    schedule.py zone info [NAME|PATH]   capabilities of this zone (or that one) and below
    schedule.py zone delete NAME [--force]

The seed's `nova zone-add <url> <user> <key>`, `zone-list`, `zone-info` and
`zone-delete <N>`, with endpoints and credential files instead of an API URL
and key. Thin: the work is in `etcd_compute.zones`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

from etcd_compute.cli import terminal_line
from etcd_compute.errors import NotFound, UsageError
from etcd_compute.keys import UUID

ZONE_ACTIONS = ("add", "list", "show", "info", "delete")
# Options that only `zone add` takes (argparse dest -> option).
ADD_OPTIONS = {"etcd": "--etcd", "etcd_prefix": "--etcd-prefix", "placement": "--placement",
               "ca_cert": "--ca-cert", "cert": "--cert", "cert_key": "--cert-key",
               "timeout": "--timeout"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("zone add / zone delete")
    group.add_argument("--etcd", metavar="HOST:PORT[,HOST:PORT]",
                       help="zone add: the child zone's etcd members")
    group.add_argument("--etcd-prefix", metavar="PREFIX",
                       help="zone add: its etcd.prefix (default none)")
    group.add_argument("--placement", metavar="URL", help="zone add: its Placement endpoint")
    group.add_argument("--ca-cert", metavar="FILE", help="zone add: its cluster CA")
    group.add_argument("--cert", metavar="FILE",
                       help="zone add: a client certificate its etcd (operator role) and "
                            "Placement accept")
    group.add_argument("--cert-key", metavar="FILE",
                       help="zone add: that certificate's key (mode 0600)")
    group.add_argument("--timeout", type=float, metavar="SECONDS",
                       help="zone add: how long to wait on its etcd and Placement "
                            "(default 5 and 30)")
    group.add_argument("--force", action="store_true",
                       help="zone delete: even while it holds instances placed from here")


def check_options(args: argparse.Namespace) -> None:
    """The zone options go with `zone add` (and --force with `zone delete`)."""
    action = args.words[1] if len(args.words) > 1 and args.words[0] == "zone" else None
    given = [option for dest, option in ADD_OPTIONS.items() if getattr(args, dest) is not None]
    if given and action != "add":
        raise UsageError(f"{given[0]} goes with zone add")
    if args.force and action != "delete":
        raise UsageError("--force goes with zone delete")


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


def _emit_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def schedule(args: argparse.Namespace, config: dict[str, Any], scheduler: Any,
             request_spec: Any, route: str | None,
             no_valid_host: Callable[[Any], int], progress: Callable[..., None]) -> int:
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
            return no_valid_host(exc)
        if args.json and not args.wait:
            _emit_json({"instances": [p.as_dict() for p in placed],
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
                progress(uuid, record)

        by_zone: dict[str, list[str]] = {}
        for one in placed:
            by_zone.setdefault(one.zone, []).append(one.destination.uuid)
        finals, failed = in_parallel(list(by_zone), lambda path: ops.wait(
            tree.find(path).store, by_zone[path],
            frozenset({states.ACTIVE, states.ERROR, states.DELETED}),
            config["scheduler"]["wait_timeout_seconds"],
            (lambda *_: None) if args.json else changed))
        if failed:
            raise next(iter(failed.values()))
        final = {uuid: record for records in finals.values() for uuid, record in records.items()}
        if args.json:
            _emit_json({"instances": [{**p.as_dict(), "record": final.get(p.destination.uuid)}
                                      for p in placed],
                        "conflicts": federation.conflicts, "replans": federation.replans})
        ok = all(r is not None and r["state"] == states.ACTIVE for r in final.values())
        return 0 if ok else 1


# --------------------------------------------------------------------- zone ...


def _rows(rows: list[tuple[str, str]]) -> None:
    width = max((len(key) for key, _ in rows), default=0)
    for key, value in rows:
        print(terminal_line(f"{key:<{width}}  {value}"))


def cmd_zone(args: argparse.Namespace, config: dict[str, Any],
             table: Callable[[list[list[str]], list[str]], None]) -> int:
    if len(args.words) < 2 or args.words[1] not in ZONE_ACTIONS:
        raise UsageError(f"zone: expected zone {'|'.join(ZONE_ACTIONS)}")
    action, rest = args.words[1], args.words[2:]
    wanted = {"add": 1, "list": 0, "show": 1, "info": (0, 1), "delete": 1}[action]
    if len(rest) not in (wanted if isinstance(wanted, tuple) else (wanted,)):
        raise UsageError(f"zone {action}: expected "
                         + {"add": "a NAME", "list": "no argument", "show": "one NAME or PATH",
                            "info": "at most one NAME or PATH", "delete": "one NAME"}[action])
    handler = {"add": _add, "list": _list, "show": _show, "info": _info,
               "delete": _delete}[action]
    return handler(args, config, rest, table)


def _add(args: argparse.Namespace, config: dict[str, Any], rest: list[str],
         _table: Any) -> int:
    from etcd_compute.zones import registry
    from etcd_compute.zones.tree import ZONE_FAULTS

    name = registry.check_name(rest[0], "zone add")
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
        _emit_json({"zone": name, "reachable": reach.startswith("reachable"), "detail": reach})
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


def _list(args: argparse.Namespace, config: dict[str, Any], _rest: list[str],
          table: Callable[[list[list[str]], list[str]], None]) -> int:
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
        _emit_json(rows)
        return 0
    # The widest column last: the capabilities, or why the zone cannot be reached.
    table([[r["name"], "yes" if r["reachable"] else "NO", r["etcd"], r["placement"],
            info.brief(r["capabilities"]) if r["capabilities"] else r["reason"] or "-"]
           for r in rows],
          ["NAME", "REACHABLE", "ETCD", "PLACEMENT", "CAPABILITIES (OR WHY NOT)"])
    return 0


def _print_info(found: dict[str, Any]) -> None:
    from etcd_compute.zones import info

    below = [label for label in found["zones"] if label != found["name"]]
    _rows([("name", found["name"]),
           ("zones", ", ".join(sorted(found["zones"])) or "-"),
           ("unreachable", "; ".join(f"{z}: {why}" for z, why in found["unreachable"].items())
            or "-"),
           *info.capabilities(found["total"])])
    if below:
        print()
        for label, summary in found["zones"].items():
            print(terminal_line(f"{label}: {info.brief(summary)}"))


def _info(args: argparse.Namespace, config: dict[str, Any], rest: list[str],
          _table: Any) -> int:
    found, _ = _summaries(config, rest[0] if rest else None)
    if args.json:
        _emit_json(found)
    else:
        _print_info(found)
    return 0


def _show(args: argparse.Namespace, config: dict[str, Any], rest: list[str],
          _table: Any) -> int:
    from etcd_compute.zones import registry

    registry.parse_path(rest[0], "zone show")
    found, records = _summaries(config, rest[0])
    entry = records.get(rest[0])
    if entry is None and rest[0] not in found["unreachable"]:
        raise NotFound(f"no zone {rest[0]} (see zone list)")
    if args.json:
        _emit_json({**found, "record": entry})
        return 0
    if entry is not None:
        files = ", ".join(f"{k}={entry['etcd'].get(k)}" for k in registry.TLS_FILES
                          if entry["etcd"].get(k)) or "none (plain TCP)"
        _rows([("etcd", f"{','.join(entry['etcd']['endpoints'])} prefix "
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


def _delete(args: argparse.Namespace, config: dict[str, Any], rest: list[str],
            _table: Any) -> int:
    from etcd_compute.zones import lookup, registry
    from etcd_compute.zones.tree import ZONE_FAULTS

    name = registry.check_name(rest[0], "zone delete")
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
        _emit_json({"zone": name, "deleted": True, "forgotten_instances": forgotten})
    else:
        print(f"ZONE {name} DELETED" + (f" ({len(forgotten)} instance(s) placed there "
                                        "forgotten here; they keep running)" if forgotten
                                        else ""))
    return 0
