"""Where the scheduler service's hosts come from (controller/offers.py): a plain shape on
the hosts' accounts (no Placement call), any other shape, or any shape once a claim was
refused in the pass, on Placement's kept candidates; our claims taken off both."""

from __future__ import annotations

import random
import uuid as uuidlib

from etcd_compute.config import deep_merge
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.controller.offers import Offers
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.scheduler.hoststate import ProviderUsage
from etcd_compute.scheduler.request import parse_query
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.scheduler.test_scheduler import account, add_host

PLAIN = parse_query("resources=VCPU:1,MEMORY_MB:256,DISK_GB:1")
ONE = {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}


def offers(hosts: int = 2, accounts: bool = True, **settings):
    store, placement = FakeStore("/t"), FakePlacement()
    rps = [add_host(placement, store, f"h{i}") for i in range(hosts)]
    if accounts:
        for rp in rps:
            account(placement, store, rp)
    cache = HostCache(store.keys)
    cache.load(store)
    merged = deep_merge(SCHEDULE_DEFAULTS, {"scheduler": settings})["scheduler"]
    asked: list[str] = []
    real = placement.allocation_candidates
    placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    made = Offers(placement, merged, cache, lambda request, count, live: None,
                  random.Random(2))
    made.begin_pass()
    return made, cache, rps, asked


def test_a_plain_shape_is_offered_the_accounts_without_asking_placement():
    made, cache, rps, asked = offers()
    hosts = made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert sorted(h.uuid for h in hosts) == sorted(rps) and asked == []
    assert (made.on_accounts, made.on_candidates) == (1, 0)


def test_traits_a_host_without_an_account_or_the_setting_off_ask_placement():
    made, cache, _, asked = offers()
    made.hosts(parse_query("resources=VCPU:1&required=CUSTOM_SSD"), 1, 64, cache.cluster(),
               ProviderUsage({}))
    assert len(asked) == 1
    made, cache, _, asked = offers(accounts=False)
    made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert len(asked) == 1 and made.on_accounts == 0
    made, cache, _, asked = offers(host_view=False)
    made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert len(asked) == 1


def test_after_a_refused_claim_the_pass_asks_placement_and_the_next_pass_trusts_again():
    made, cache, _, asked = offers()
    made.refused()
    made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert len(asked) == 1
    made.begin_pass()
    made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert len(asked) == 1 and made.on_accounts == 1


def test_what_we_wrote_is_taken_off_the_accounts_until_they_show_it():
    made, cache, rps, _ = offers(hosts=1)
    made.written(99, [(rps[0], {rps[0]: {"resources": ONE}})])
    (host,) = made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert host.instances == 1 and host.free["VCPU"] == 3
    made.begin_pass()  # (the account is as of revision 0: it does not show it yet)
    (host,) = made.hosts(PLAIN, 1, 64, cache.cluster(), ProviderUsage({}))
    assert host.free["VCPU"] == 3
    assert str(uuidlib.UUID(rps[0])) == rps[0]
