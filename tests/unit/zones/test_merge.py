"""The merge: one scale for every zone's picks, best next pick first, prefixes only."""

from __future__ import annotations

import random

from etcd_compute.zones import merge


def test_weights_are_normalized_over_every_zones_picks():
    offers = {"a": [(100.0, 4.0)], "b": [(50.0, 2.0)], "c": [(0.0, 0.0)]}
    weighed = merge.weights(offers, [1.0, 1.0])
    assert weighed == {"a": [2.0], "b": [1.0], "c": [0.0]}
    # A negative multiplier packs: the fullest first.
    assert merge.weights(offers, [-1.0, 0.0]) == {"a": [-1.0], "b": [-0.5], "c": [0.0]}


def test_split_takes_the_best_next_pick_one_instance_at_a_time():
    # a's host is big: its picks stay better than b's first until it is as full.
    offers = {"a": [(90.0,), (80.0,), (70.0,), (60.0,)], "b": [(75.0,), (65.0,)]}
    assert merge.split(offers, [1.0], 3) == {"a": 2, "b": 1}
    assert merge.split(offers, [1.0], 5) == {"a": 3, "b": 2}
    assert merge.split(offers, [1.0], 9) == {"a": 4, "b": 2}  # fewer: all there is


def test_equal_picks_spread_and_ties_go_to_a_random_zone():
    offers = {name: [(10.0,), (5.0,)] for name in "abcd"}
    assert merge.split(offers, [1.0], 4) == {"a": 1, "b": 1, "c": 1, "d": 1}
    firsts = {next(iter(merge.split(offers, [1.0], 1, random.Random(seed))))
              for seed in range(20)}
    assert len(firsts) > 1


def test_one_zone_takes_a_whole_affinity_request():
    offers = {"a": [(90.0,), (10.0,)], "b": [(50.0,), (40.0,), (30.0,)]}
    assert merge.split(offers, [1.0], 3, one_zone=True) == {"b": 3}
    assert merge.split(offers, [1.0], 2, one_zone=True) == {"a": 2}
    # Where the group has members, if it has any; none there fits: nothing.
    assert merge.split(offers, [1.0], 2, one_zone=True, prefer={"b"}) == {"b": 2}
    assert merge.split(offers, [1.0], 3, one_zone=True, prefer={"a"}) == {}
    assert merge.split(offers, [1.0], 4, one_zone=True) == {}


def test_nothing_offered_is_an_empty_plan():
    assert merge.split({}, [1.0], 2) == {}
    assert merge.split({"a": []}, [1.0, 2.0], 2) == {}
    assert merge.weights({"a": []}, [1.0]) == {"a": []}
