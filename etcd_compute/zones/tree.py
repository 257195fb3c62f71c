"""The zones as seen from here: this zone, its children, theirs; connected on demand and
walked in parallel.

Zones talk to each other through plain Python calls: the scheduler here holds
client credentials for each child and runs a `Scheduler` (this zone's
scheduler settings) against the child's own etcd and Placement; a child's
children are read from the child's etcd, and so on down. No daemon sits
between zones (docs/explanation/zones.md says why). A zone that cannot be reached (its
etcd or Placement down, its credentials refused or unusable, a loop back to
a zone above it) is skipped with the reason, never waited on beyond its own
timeouts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from etcd_compute.errors import ConfigError, ServiceUnavailable, UsageError
from etcd_compute.etcd import Store
from etcd_compute.etcd_connection import PermissionDenied
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import Scheduler
from etcd_compute.zones import registry

T = TypeVar("T")

# What makes a zone unreachable, as opposed to a fault of the request.
ZONE_FAULTS = (ServiceUnavailable, ConfigError, PermissionDenied)


class ZoneUnreachable(ServiceUnavailable):
    """A zone that an instance or a command needs cannot be reached."""


def join(path: str, name: str) -> str:
    return f"{path}/{name}" if path else name


@dataclass
class Zone:
    """One zone: where it is below this one (`path`, "" for this zone) and a Scheduler over its
    etcd and Placement (connected on first use)."""

    path: str
    name: str
    scheduler: Scheduler
    # Its record in its parent's etcd (None for this zone).
    entry: dict[str, Any] | None = None
    # The etcd identities from this zone down to it (a loop is a zone seen twice).
    lineage: tuple[tuple[tuple[str, ...], str], ...] = ()

    @property
    def store(self) -> Store:
        return self.scheduler.store

    @property
    def placement(self) -> PlacementClient:
        return self.scheduler.placement

    @property
    def label(self) -> str:
        """How the operator sees it: its path, or this zone's own name."""
        return self.path or self.name


@dataclass(frozen=True)
class Unreachable:
    path: str
    reason: str


@dataclass
class Walk(Generic[T]):
    """What a walk found: each visited zone's answer, the zones themselves, and the zones it
    could not reach (with why)."""

    results: dict[str, T] = field(default_factory=dict)
    zones: dict[str, Zone] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def lost(self, path: str, reason: str) -> None:
        with self.lock:
            self.unreachable.setdefault(path, reason)


class ZoneTree:
    """This zone (`local`, the Scheduler the CLI made) and the zones below it."""

    def __init__(self, config: dict[str, Any], local: Scheduler | None = None,
                 connect: Callable[[dict[str, Any]], Scheduler] | None = None):
        self.config = config
        self.connect = connect or Scheduler
        local = local or Scheduler(config)
        self.root = Zone("", config["zones"]["name"], local,
                         lineage=(registry.identity(config),))
        self._known: dict[str, Zone] = {"": self.root}
        self._lock = threading.Lock()

    def known(self) -> list[Zone]:
        """Every zone connected so far (this one first)."""
        with self._lock:
            return list(self._known.values())

    def close(self) -> None:
        for zone in self._known.values():
            if zone is not self.root:
                zone.scheduler.close()

    def __enter__(self) -> ZoneTree:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --------------------------------------------------------------- children

    def children(self, zone: Zone) -> tuple[list[Zone], dict[str, str]]:
        """The zones `zone` lists, and those of them that cannot be used (path -> why).
        Raises what reading `zone`'s etcd raises."""
        records, faults = registry.read_all(zone.store)
        bad = {join(zone.path, name): reason for name, reason in faults.items()}
        found = []
        # This zone's own records were written by its operator; below, by others.
        allowed = None if zone is self.root else self.config["zones"]["credential_dirs"]
        for name, entry in sorted(records.items()):
            path = join(zone.path, name)
            with self._lock:
                known = self._known.get(path)
            if known is not None and known.entry == entry:
                found.append(known)
                continue
            if path.count("/") + 1 > registry.MAX_DEPTH:
                bad[path] = f"deeper than {registry.MAX_DEPTH} zones"
                continue
            try:
                registry.check_credentials(entry, allowed)
            except ConfigError as exc:
                bad[path] = str(exc)
                continue
            config = registry.client_config(self.config, entry)
            identity = registry.identity(config)
            if identity in zone.lineage:
                bad[path] = ("a loop: its etcd is that of a zone above it "
                             f"({', '.join(identity[0])} prefix {identity[1]!r})")
                continue
            child = Zone(path, name, self.connect(config), entry, (*zone.lineage, identity))
            with self._lock:
                old = self._known.get(path)
                self._known[path] = child
            if old is not None:
                old.scheduler.close()
            found.append(child)
        return found, bad

    def find(self, path: str) -> Zone:
        """The zone at `path` ("" is this one), connected; ZoneUnreachable when a zone on
        the way cannot be reached, UsageError when there is no such zone."""
        zone = self.root
        for name in registry.parse_path(path) if path else []:
            try:
                kids, bad = self.children(zone)
            except ZONE_FAULTS as exc:
                raise ZoneUnreachable(f"zone {zone.label} is unreachable: {exc}") from None
            target = join(zone.path, name)
            if target in bad:
                raise ZoneUnreachable(f"zone {target}: {bad[target]}")
            zone = next((kid for kid in kids if kid.name == name), None)  # type: ignore[assignment]
            if zone is None:
                raise UsageError(f"no zone {target} (see schedule.py zone list)")
        return zone

    # ------------------------------------------------------------------ walks

    def walk(self, visit: Callable[[Zone], T], route: str | None = None) -> Walk[T]:
        """`visit(zone)` for this zone and every zone below it, or (`route` "a/b") for the
        zone at that path and every zone below it; all in parallel. A zone that cannot be
        reached, or whose visit raises a zone fault, is in `unreachable` with the reason.
        Raises what reading this zone's own etcd raises, and UsageError for a route to no
        zone."""
        out: Walk[T] = Walk()
        rest = registry.parse_path(route) if route else None
        self._walk(self.root, rest, visit, out, top=True)
        return out

    def _visit(self, zone: Zone, visit: Callable[[Zone], T], out: Walk[T]) -> None:
        try:
            result = visit(zone)
        except ZONE_FAULTS as exc:
            out.lost(zone.path, str(exc))
            return
        with out.lock:
            out.results[zone.path] = result

    def _walk(self, zone: Zone, rest: list[str] | None, visit: Callable[[Zone], T],
              out: Walk[T], top: bool = False) -> None:
        with out.lock:
            out.zones[zone.path] = zone
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="zone") as pool:
            futures = []
            if rest is None:
                futures.append(pool.submit(self._visit, zone, visit, out))
            try:
                kids, bad = self.children(zone)
            except ZONE_FAULTS as exc:
                if top:
                    raise
                # Nothing below it can be reached (a route through it included).
                out.lost(zone.path, str(exc))
                kids, bad, rest = [], {}, None
            if rest:
                target = join(zone.path, rest[0])
                kids = [kid for kid in kids if kid.name == rest[0]]
                bad = {path: why for path, why in bad.items() if path == target}
                if not kids and not bad:
                    raise UsageError(f"--zone: no zone {target} (see schedule.py zone list)")
            for path, why in bad.items():
                out.lost(path, why)
            below = None if not rest or len(rest) == 1 else rest[1:]
            futures += [pool.submit(self._walk, kid, below, visit, out) for kid in kids]
            for future in futures:
                future.result()  # a fault of the request (UsageError...) stops the walk
