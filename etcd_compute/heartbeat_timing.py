"""When a compute renews its heartbeat lease, and when it fences (powers its guests off
because the lease may be gone): derived from its TTL, its fence margin and how long an
etcd leader election may take. `config.check_fencing` refuses settings that leave no room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# etcd's defaults these are derived with (defaults.ETCD_DEFAULTS holds them).
ETCD_TIMEOUT = 5.0
ELECTION_SECONDS = 4.0

# A failed renewal is tried again this soon (on the next member).
RENEWAL_RETRY_SECONDS = 0.2
# What a renewal needs besides the election: its own round trip, a loaded host's scheduling.
RENEWAL_SLACK_SECONDS = 0.5
# Below these the heartbeat would be busy renewing (or give a live member no time to answer).
MIN_RENEWAL_INTERVAL, MIN_RENEWAL_TRY = 0.5, 0.25


@dataclass(frozen=True)
class HeartbeatTiming:
    """When the heartbeat renews its lease, and when it fences.

    The worst moment for an etcd leader to die is just before a renewal is due: the
    renewals that follow fail (the dead member) or wait (a follower holds a keep-alive until
    a new leader answers it) until the election is over. So a renewal is due early enough
    that the election (`etcd.election_seconds`) and some slack still fit before the fence
    point, and each try is short enough that two of them fit between the due time and the
    fence point: one may be lost on the dead member, the next waits the election out.
    With a single member (`election_seconds` 0) there is no other member to try: a try
    may take all the time there is."""

    interval: float  # between renewals while they succeed
    try_timeout: float  # one try of a renewal (at most etcd.timeout)
    retry: float  # after a failed try
    fence_after: float  # no renewal for this long: fence
    # The interval and the room for each of two tries are long enough to be of use.
    workable: bool = True


def heartbeat_timing(compute: dict[str, Any], etcd: dict[str, Any]) -> HeartbeatTiming:
    ttl, margin = compute["heartbeat_ttl"], compute["fence_margin_seconds"]
    election = etcd.get("election_seconds", ELECTION_SECONDS)
    fence_after = ttl - margin
    interval = min(ttl / 3, fence_after - election - RENEWAL_SLACK_SECONDS)
    room = fence_after - interval - RENEWAL_RETRY_SECONDS
    if election > 0:
        room /= 2  # one try may be lost on the dead member, the next waits the election out
    return HeartbeatTiming(
        interval, min(etcd.get("timeout", ETCD_TIMEOUT), room),
        RENEWAL_RETRY_SECONDS, fence_after,
        workable=interval >= MIN_RENEWAL_INTERVAL and room >= MIN_RENEWAL_TRY)
