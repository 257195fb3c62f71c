"""The heartbeat's timing (heartbeat_timing.py): renewals early enough to outlast an etcd
election before the fence point, tries short enough for two of them (one with a single
member), etcd's defaults when a section leaves them out. The heartbeat's behaviour under
these timings is tests/unit/compute/test_heartbeat.py's."""

from __future__ import annotations

from etcd_compute import defaults
from etcd_compute.heartbeat_timing import (
    ELECTION_SECONDS,
    ETCD_TIMEOUT,
    RENEWAL_RETRY_SECONDS,
    heartbeat_timing,
)


def test_an_election_is_left_room_before_the_fence_point():
    timing = heartbeat_timing({"heartbeat_ttl": 10, "fence_margin_seconds": 3},
                              {"timeout": 5.0, "election_seconds": 4.0})
    assert timing.fence_after == 7 and timing.workable
    assert timing.interval + 2 * timing.try_timeout + RENEWAL_RETRY_SECONDS <= 7


def test_a_single_member_gives_one_try_all_the_room():
    one = heartbeat_timing({"heartbeat_ttl": 6, "fence_margin_seconds": 1},
                           {"timeout": 5.0, "election_seconds": 0})
    two = heartbeat_timing({"heartbeat_ttl": 6, "fence_margin_seconds": 1},
                           {"timeout": 5.0, "election_seconds": 4.0})
    assert one.try_timeout > two.try_timeout


def test_etcds_defaults_are_the_configs():
    assert defaults.ETCD_DEFAULTS["timeout"] == ETCD_TIMEOUT
    assert defaults.ETCD_DEFAULTS["election_seconds"] == ELECTION_SECONDS
    assert heartbeat_timing({"heartbeat_ttl": 10, "fence_margin_seconds": 3}, {}) == \
        heartbeat_timing({"heartbeat_ttl": 10, "fence_margin_seconds": 3},
                         {"timeout": ETCD_TIMEOUT, "election_seconds": ELECTION_SECONDS})
