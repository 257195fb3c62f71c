"""A claim the controller moved (a reschedule, a dead host's rebuild) for an etcd transaction
that then did not happen: put back, unless someone touched it since.

    claims.written_or_undone(write, partial(put_back, store, placement, spec, generation))

Back to the instance's old host while its record there lives; released when it ended
(ERROR, DELETED: its claim was its own to free); either only at the generation the move
left it at (`claims.undo_move`), so a destroy that freed it meanwhile never sees it come
back. etcd unreachable for the record too (as the write was, likely): the old host, the
generation still deciding.
"""

from __future__ import annotations

import logging
from typing import Any

from etcd_compute import claims
from etcd_compute.errors import EtcdUnavailable
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import records, states
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.controller")


def put_back(store: KeyValueStore, placement: PlacementClient, spec: dict[str, Any],
             generation: int | None) -> bool:
    """The claim of `spec`'s instance as it was before the move; False if left as it is."""
    uuid = spec["uuid"]
    try:
        read = records.read_record(store, spec["host"], uuid)
    except EtcdUnavailable:
        live = True
    else:
        live = read.record is not None and read.state not in (states.ERROR, states.DELETED)
    if claims.undo_move(placement, uuid, spec["allocations"] if live else {}, generation,
                        spec["project_id"], spec["user_id"]):
        return True
    LOG.info("claim changed since it was moved; left as it is", extra={"instance": uuid})
    return False


def put_back_all(store: KeyValueStore, placement: PlacementClient,
                 specs: list[dict[str, Any]], generations: dict[str, int | None]) -> None:
    """`put_back` for each of several moved together (`claims.move_many`)."""
    for spec in specs:
        put_back(store, placement, spec, generations[spec["uuid"]])
