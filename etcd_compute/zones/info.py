"""What zones have: the seed's `zone-info` capabilities, rolled up over a zone's subtree.

Each zone is read from its own Placement (every provider's inventory, usage
and traits) and etcd (which hosts are up, their drivers), as `schedule.py
hosts` reads it. The seed's `<service>_<capability> = <min>,<max>` becomes
`compute_<resource class> = <min>,<max>`: the least and most free on one host
that is up and enabled (what one instance could get); `free_<resource class>`
is the zone's free capacity over every provider (what its Placement reports).
"""

from __future__ import annotations

from typing import Any

from etcd_compute.ops import operations
from etcd_compute.scheduler.hoststate import SHARING_TRAIT
from etcd_compute.zones.tree import Zone, ZoneTree


def describe(zone: Zone) -> dict[str, Any]:
    """One zone's own hosts, summed (its children not included)."""
    return summarize(operations.hosts(zone.store, zone.placement))


def summarize(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """Hosts up/down/disabled, drivers, traits, and per resource class: capacity, used,
    free, and the least and most free on one usable host."""
    summary: dict[str, Any] = {"hosts_up": 0, "hosts_down": 0, "hosts_disabled": 0,
                               "hypervisor": set(), "traits": set(), "resources": {}}
    for host in hosts:
        sharing = SHARING_TRAIT in host["traits"]
        usable = host["alive"] and not host["disabled"] and not sharing
        if not sharing:
            summary["hosts_up" if host["alive"] else "hosts_down"] += 1
            summary["hosts_disabled"] += host["disabled"]
        if host.get("driver"):
            summary["hypervisor"].add(host["driver"])
        summary["traits"].update(host["traits"])
        for rc, amounts in host["resources"].items():
            row = summary["resources"].setdefault(rc, {"capacity": 0, "used": 0, "free": 0,
                                                       "min_free": None, "max_free": None})
            free = amounts["capacity"] - amounts["used"]
            row["capacity"] += amounts["capacity"]
            row["used"] += amounts["used"]
            row["free"] += free
            if usable:
                row["min_free"] = free if row["min_free"] is None else min(row["min_free"], free)
                row["max_free"] = free if row["max_free"] is None else max(row["max_free"], free)
    return finish(summary)


def finish(summary: dict[str, Any]) -> dict[str, Any]:
    return {**summary, "hypervisor": sorted(summary["hypervisor"]),
            "traits": sorted(summary["traits"])}


def combine(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Zones' summaries added up (a subtree's)."""
    total: dict[str, Any] = {"hosts_up": 0, "hosts_down": 0, "hosts_disabled": 0,
                             "hypervisor": set(), "traits": set(), "resources": {}}
    for part in parts:
        for count in ("hosts_up", "hosts_down", "hosts_disabled"):
            total[count] += part[count]
        total["hypervisor"].update(part["hypervisor"])
        total["traits"].update(part["traits"])
        for rc, row in part["resources"].items():
            into = total["resources"].setdefault(rc, {"capacity": 0, "used": 0, "free": 0,
                                                      "min_free": None, "max_free": None})
            for key in ("capacity", "used", "free"):
                into[key] += row[key]
            for key, pick in (("min_free", min), ("max_free", max)):
                if row[key] is not None:
                    into[key] = row[key] if into[key] is None else pick(into[key], row[key])
    return finish(total)


def info(tree: ZoneTree, route: str | None = None) -> dict[str, Any]:
    """The zone at `route` ("" or None: this one) and every zone below it: each one's own
    summary, the subtree's total, and the zones that could not be reached."""
    walk = tree.walk(describe, route or None)
    top = route or ""
    zones = {zone.label: walk.results[path] for path, zone in sorted(walk.zones.items())
             if path in walk.results}
    return {"name": top or tree.root.label, "zones": zones,
            "unreachable": {path or tree.root.label: why
                            for path, why in sorted(walk.unreachable.items())},
            "total": combine(list(walk.results.values()))}


def capabilities(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The seed's property rows for a summary: hypervisor, hosts, compute_<RC> = min,max,
    free_<RC>, traits (values joined with ';' as the seed's capabilities are)."""
    rows = [("hypervisor", ";".join(summary["hypervisor"]) or "-"),
            ("hosts", f"{summary['hosts_up']} up, {summary['hosts_down']} down, "
                      f"{summary['hosts_disabled']} disabled")]
    for rc, row in sorted(summary["resources"].items()):
        if row["min_free"] is not None:
            rows.append((f"compute_{rc}", f"{row['min_free']},{row['max_free']}"))
    for rc, row in sorted(summary["resources"].items()):
        rows.append((f"free_{rc}", f"{row['free']} of {row['capacity']}"))
    rows.append(("traits", ";".join(summary["traits"]) or "-"))
    return rows


def brief(summary: dict[str, Any]) -> str:
    """One line for `zone list`: hypervisor=..., hosts=up;down, free=RC:N;..."""
    free = ";".join(f"{rc}:{row['free']}" for rc, row in sorted(summary["resources"].items()))
    return (f"hypervisor={';'.join(summary['hypervisor']) or '-'}, "
            f"hosts={summary['hosts_up']} up;{summary['hosts_down']} down, free={free or '-'}")
