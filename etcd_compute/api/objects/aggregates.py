"""Host aggregates (Nova's os-aggregates): named groups of compute hosts with metadata,
kept in etcd (`/aggregates/<id>`, names unique through `/aggregate-names/<name>`, ids
counted up by `/aggregate-last-id` and never given again, as Nova's database does).

Each aggregate has a uuid, and its hosts are members of that aggregate in Placement, as
Nova mirrors them: the scheduler's `member_of` then finds them. An aggregate's
`availability_zone` (its metadata key, as in Nova) makes its hosts that zone's.

Order of writes: etcd first (it decides: a name or a host already there is refused
there), then Placement; if Placement fails the etcd change is undone, so the two never
disagree about a host for longer than one request.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from dataclasses import asdict, dataclass, field
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import ConflictError, InvalidMessage, NotFound
from etcd_compute.etcd import Compare, Delete, KeyValueStore, Txn, absent, put_message
from etcd_compute.placement import PlacementClient

AZ_KEY = "availability_zone"
# As the aggregate's schema allows (etcd_compute/schemas/aggregate.json).
MAX_METADATA = 256
_RETRIES = 20


class AggregateExists(Exception):
    """Another aggregate has this name (409, Nova's message)."""


class AggregateChanged(Exception):
    """The aggregate changed (or went) while we wrote it: asked again, it may hold."""


@dataclass
class Aggregate:
    id: int
    uuid: str
    name: str
    availability_zone: str | None = None
    hosts: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    created_at: float = 0.0
    updated_at: float | None = None
    # The etcd revision it was read at (0: not stored yet).
    revision: int = 0

    @classmethod
    def from_message(cls, message: dict[str, Any], revision: int = 0) -> Aggregate:
        return cls(**{**message, "revision": revision})

    def to_message(self) -> dict[str, Any]:
        message = asdict(self)
        message.pop("revision")
        return message


class Aggregates:
    def __init__(self, store: KeyValueStore, placement: PlacementClient):
        self.store = store
        self.keys = store.keys
        self.placement = placement

    def list(self) -> list[Aggregate]:
        entries, _ = self.store.get_prefix(self.keys.aggregates())
        found = []
        for entry in entries:
            try:
                found.append(Aggregate.from_message(
                    messages.decode(messages.AGGREGATE, entry.value), entry.mod_revision))
            except (InvalidMessage, TypeError):
                continue  # unreadable: not shown (an operator may delete it)
        return sorted(found, key=lambda a: a.id)

    def get(self, aggregate_id: int) -> Aggregate | None:
        message, revision = self.store.read(messages.AGGREGATE,
                                            self.keys.aggregate(aggregate_id))
        return None if message is None else Aggregate.from_message(message, revision)

    def zones(self) -> dict[str, list[str]]:
        """{zone: its aggregates' uuids} of the aggregates that name a zone and have hosts
        (as Nova's, a zone is its hosts': one without any is no zone to create in)."""
        found: dict[str, list[str]] = {}
        for aggregate in self.list():
            if aggregate.availability_zone and aggregate.hosts:
                found.setdefault(aggregate.availability_zone, []).append(aggregate.uuid)
        return found

    def create(self, name: str, zone: str | None) -> Aggregate:
        """A new aggregate with the next id: AggregateExists if the name is taken."""
        name_key, last_key = self.keys.aggregate_name(name), self.keys.aggregate_last_id()
        for _ in range(_RETRIES):
            last, last_revision = self.store.read(messages.AGGREGATE_LAST_ID, last_key)
            new_id = (last or {"id": 0})["id"] + 1
            aggregate = Aggregate(new_id, str(uuidlib.uuid4()), name, zone,
                                  metadata={AZ_KEY: zone} if zone else {},
                                  created_at=time.time())
            key = self.keys.aggregate(new_id)
            written = self.store.commit(Txn(
                [absent(name_key), absent(key),
                 absent(last_key) if last is None else Compare(last_key, "mod", "==",
                                                               last_revision)],
                [put_message(messages.AGGREGATE, key, aggregate.to_message()),
                 put_message(messages.AGGREGATE_NAME, name_key, {"id": new_id}),
                 put_message(messages.AGGREGATE_LAST_ID, last_key, {"id": new_id})]))
            if written is not None:
                aggregate.revision = written
                return aggregate
            if self.store.get(name_key) is not None:
                raise AggregateExists(f"Aggregate {name} already exists.")
        raise ConflictError("aggregates: the last id kept changing; try again")

    def save(self, aggregate: Aggregate, old_name: str | None = None) -> Aggregate:
        """Write a changed aggregate if nobody changed it since it was read
        (AggregateChanged otherwise); a new name must be free (AggregateExists)."""
        key = self.keys.aggregate(aggregate.id)
        aggregate.updated_at = time.time()
        renamed = old_name is not None and old_name != aggregate.name
        compare = [Compare(key, "mod", "==", aggregate.revision)]
        ops: list[Any] = [put_message(messages.AGGREGATE, key, aggregate.to_message())]
        if renamed:
            new_name_key = self.keys.aggregate_name(aggregate.name)
            compare.append(absent(new_name_key))
            ops += [put_message(messages.AGGREGATE_NAME, new_name_key, {"id": aggregate.id}),
                    Delete(self.keys.aggregate_name(str(old_name)))]
        written = self.store.commit(Txn(compare, ops))
        if written is None:
            if renamed and self.store.get(self.keys.aggregate_name(aggregate.name)):
                raise AggregateExists(f"Aggregate {aggregate.name} already exists.")
            raise AggregateChanged(str(aggregate.id))
        aggregate.revision = written
        return aggregate

    def delete(self, aggregate: Aggregate) -> bool:
        """Remove it and its name if unchanged since read; False if it changed or went."""
        key = self.keys.aggregate(aggregate.id)
        return self.store.commit(Txn(
            [Compare(key, "mod", "==", aggregate.revision)],
            [Delete(key), Delete(self.keys.aggregate_name(aggregate.name))])) is not None

    def add_host(self, aggregate: Aggregate, host: str, provider: str) -> Aggregate:
        """`host` (provider `provider`) joins: in etcd, then in Placement."""
        aggregate.hosts = [*aggregate.hosts, host]
        saved = self.save(aggregate)
        try:
            self.placement.change_aggregates(provider, add=[aggregate.uuid])
        except Exception:
            saved.hosts = [h for h in saved.hosts if h != host]
            self.save(saved)
            raise
        return saved

    def remove_host(self, aggregate: Aggregate, host: str, provider: str | None) -> Aggregate:
        """`host` leaves: in etcd, then in Placement (a provider gone has no membership)."""
        aggregate.hosts = [h for h in aggregate.hosts if h != host]
        saved = self.save(aggregate)
        if provider is None:
            return saved
        try:
            self.placement.change_aggregates(provider, remove=[aggregate.uuid])
        except NotFound:
            pass  # the provider went (a deleted service): no membership left
        except Exception:
            saved.hosts = [*saved.hosts, host]
            self.save(saved)
            raise
        return saved
