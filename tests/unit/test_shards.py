"""Candidate shards: a host's shard is a stable hash of its uuid; a pick holds about as many
hosts as wanted, or is None when that would be all of them."""

from __future__ import annotations

import random
import uuid as uuidlib
from collections import Counter

from etcd_compute import shards


def test_a_hosts_shard_is_stable_and_hosts_spread_over_all_shards():
    hosts = [str(uuidlib.uuid4()) for _ in range(1600)]
    assert [shards.aggregate_of(h) for h in hosts] == [shards.aggregate_of(h) for h in hosts]
    spread = Counter(shards.shard_of(h) for h in hosts)
    assert len(spread) == shards.SHARDS
    assert max(spread.values()) < 2 * 1600 / shards.SHARDS


def test_a_pick_holds_about_what_is_wanted():
    rng = random.Random(1)
    picked = shards.pick(1000, 100, rng)
    assert picked is not None and len(picked) == 2  # 2 of 16 shards: ~125 of 1000 hosts
    assert set(picked) <= set(shards.AGGREGATES)
    assert len(shards.pick(1000, 300, rng)) == 5
    assert shards.pick(100, 100, rng) is None  # all of them: ask about all
    assert shards.pick(0, 100, rng) is None
    assert len({tuple(shards.pick(1000, 100, rng)) for _ in range(20)}) > 1  # random
