"""Merge the zones' estimates into one plan: which zone takes how many.

The seed: "the parent zone sorts and aggregates all the weights and a final
build plan is constructed". A zone's picks come in the order it would make
them, each depleting its hosts, so a zone can only take a prefix of its
list. The merge takes, one instance at a time, the zone whose next pick
weighs most. Weights are put on one scale here: each weigher's raw values
are normalized over every pick of every zone, times the multiplier, summed
(Nova normalizes over the hosts it compares; a zone's own 0..1 would not be
comparable with another zone's). Pure functions: no etcd, no Placement.
"""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence


def weights(offers: dict[str, list[Sequence[float]]],
            multipliers: Sequence[float]) -> dict[str, list[float]]:
    """Each pick's total weight, on one scale for all zones."""
    every = [vector for vectors in offers.values() for vector in vectors]
    bounds = [(min(v[i] for v in every), max(v[i] for v in every)) if every else (0.0, 0.0)
              for i in range(len(multipliers))]

    def total(vector: Sequence[float]) -> float:
        score = 0.0
        for (low, high), multiplier, value in zip(bounds, multipliers, vector, strict=True):
            if high > low:
                score += multiplier * (value - low) / (high - low)
        return score

    return {zone: [total(v) for v in vectors] for zone, vectors in offers.items()}


def split(offers: dict[str, list[Sequence[float]]], multipliers: Sequence[float], count: int,
          rng: random.Random | None = None, one_zone: bool = False,
          prefer: Collection[str] = ()) -> dict[str, int]:
    """{zone: how many it takes}, the best picks first; fewer than `count` in all when they
    do not all fit. `one_zone` (a server group with affinity): every instance in the one
    zone that fits them all and whose first pick weighs most, among the `prefer`red zones
    (where the group has members) if any. Ties go to a random zone (`rng`)."""
    rng = rng or random.Random()
    weighed = weights(offers, multipliers)
    zones = list(weighed)
    rng.shuffle(zones)  # ties: a random zone, not always the first by name
    if one_zone:
        fitting = [z for z in zones if len(weighed[z]) >= count]
        preferred = [z for z in fitting if z in prefer]
        if prefer and not preferred:
            return {}
        choices = preferred or fitting
        if not choices:
            return {}
        best = max(choices, key=lambda z: weighed[z][0])
        return {best: count}
    taken = {zone: 0 for zone in zones}
    for _ in range(count):
        heads = [z for z in zones if taken[z] < len(weighed[z])]
        if not heads:
            break
        best = max(heads, key=lambda z: weighed[z][taken[z]])
        taken[best] += 1
    return {zone: n for zone, n in taken.items() if n}
