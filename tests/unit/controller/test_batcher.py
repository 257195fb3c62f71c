"""The scheduler service's pass over the queue, in memory (FakeStore, FakePlacement): one
candidates query per shape, one claim, few transactions; conflicts split the batch and never
fail innocent requests; hostile entries answered; nothing claimed twice or left claimed."""

from __future__ import annotations

import json
import random
import time
import uuid as uuidlib
from collections import Counter

import pytest

from etcd_compute import messages
from etcd_compute.config import deep_merge, validate
from etcd_compute.controller.batcher import Batcher, LostLeadership
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import ConflictError
from etcd_compute.etcd import Compare, Delete, Txn, put_message
from etcd_compute.network_backend import LIBVIRT, NEUTRON, trait_of
from etcd_compute.scheduler import Scheduler
from etcd_compute.scheduler.queue import instance_uuids, read_pending, request_message
from etcd_compute.scheduler.spec import RequestSpec
from tests.unit.fakes import FakePlacement, FakeStore
from tests.unit.scheduler.test_scheduler import add_host

QUERY = "resources=VCPU:1,MEMORY_MB:256,DISK_GB:1"
BIG = "resources=VCPU:2,MEMORY_MB:512,DISK_GB:2"


class Service:
    """A leader's batcher over fakes; `leading` and the leader key can be taken away."""

    def __init__(self, hosts: int = 3, vcpu: int = 4, backend: str = LIBVIRT, **settings):
        self.store, self.placement = FakeStore("/t"), FakePlacement()
        self.hosts = [add_host(self.placement, self.store, f"host-{i}", vcpu=vcpu)
                      for i in range(hosts)]
        config = deep_merge(SCHEDULE_DEFAULTS, {"network": {"backend": backend}, "scheduler": {
            "default_image": "file:///dev/null", "claim_retries": 2, **settings}})
        validate(config, "schedule_config", "unit test")
        self.settings = config["scheduler"]
        self.scheduler = Scheduler(config, store=self.store, placement=self.placement,
                                   rng=random.Random(3))
        self.leader = self.store.commit(Txn([], [messages_put(self.store)]))
        self.leading = True
        self.cache = HostCache(self.store.keys)
        self.batcher = Batcher(self.store, self.placement, self.scheduler, self.cache,
                               lambda: Compare(self.store.keys.leader(), "create", "==",
                                               self.leader),
                               lambda: self.leading, lambda: self.store.grant(3600),
                               random.Random(4))

    def ask(self, query: str = QUERY, deadline: float | None = None, **options) -> str:
        spec = RequestSpec.build(query, **options)
        name = str(uuidlib.uuid4())
        self.store.put(messages.SCHEDULE_REQUEST, self.store.keys.queue_request(name),
                       request_message(spec, "test", deadline))
        return name

    def run(self) -> int:
        self.cache.load(self.store)
        entries, _ = self.store.get_prefix(self.store.keys.queue_requests())
        return self.batcher.run(read_pending(self.store.keys, entries, self.settings))

    def answer(self, name: str) -> dict | None:
        message, _ = self.store.read(messages.SCHEDULE_ANSWER, self.store.keys.queue_answer(name))
        return message

    def pending(self) -> list[str]:
        entries, _ = self.store.get_prefix(self.store.keys.queue_requests())
        return [e.key.rsplit("/", 1)[-1] for e in entries]

    def check_no_overcommit(self) -> None:
        for rp in self.hosts:
            used = self.placement.get_usages(rp)
            for rc, amount in used.items():
                assert amount <= self.placement.capacity(rp, rc), (rp, rc)


def messages_put(store: FakeStore):
    return put_message(messages.CONTROLLER_LEADER, store.keys.leader(),
                       {"name": "test", "since": time.time()})


def placed(service: Service, name: str) -> list[dict]:
    answer = service.answer(name)
    assert answer is not None and "destinations" in answer, answer
    return answer["destinations"]


def test_a_batch_is_one_candidates_query_one_claim_and_one_transaction():
    service = Service()
    names = [service.ask() for _ in range(5)]
    commits = len(service.store.committed)
    assert service.run() == 5
    assert [c for c in service.placement.calls if c.startswith("claim")] == ["claim_many 5"]
    assert len(service.store.committed) - commits == 1
    assert service.pending() == []
    for name in names:
        (destination,) = placed(service, name)
        assert destination["uuid"] == instance_uuids(name, 1)[0]
        spec, _ = service.store.read(messages.INSTANCE_SPEC,
                                     service.store.keys.spec(destination["host"],
                                                             destination["uuid"]))
        assert spec["allocations"] == destination["allocations"]
        assert service.placement.consumers[destination["uuid"]]["allocations"] == \
            destination["allocations"]
    service.check_no_overcommit()


def test_the_instances_events_name_who_asked_not_the_service():
    service = Service()
    spec = RequestSpec.build(QUERY)
    name = str(uuidlib.uuid4())
    service.store.put(messages.SCHEDULE_REQUEST, service.store.keys.queue_request(name),
                      {**request_message(spec, "vm:1"), "requested_by": "alice@desk"})
    service.run()
    (destination,) = placed(service, name)
    spec, _ = service.store.read(messages.INSTANCE_SPEC, service.store.keys.spec(
        destination["host"], destination["uuid"]))
    assert spec["requested_by"] == "alice@desk"


def test_specs_are_stamped_when_they_are_written_not_before_their_claim():
    service = Service()
    claimed_at = []
    claim_many = service.placement.claim_many

    def slow_claim(*args, **kwargs):
        time.sleep(0.05)
        claimed_at.append(time.time())
        return claim_many(*args, **kwargs)

    service.placement.claim_many = slow_claim
    names = [service.ask() for _ in range(2)]  # two requests: one POST for both
    service.run()
    for name in names:
        (destination,) = placed(service, name)
        spec, _ = service.store.read(messages.INSTANCE_SPEC, service.store.keys.spec(
            destination["host"], destination["uuid"]))
        assert spec["requested_at"] >= claimed_at[0]


def test_requests_of_a_batch_deplete_each_other_across_shapes():
    """3 hosts x 4 VCPU, 1024 MB: small and big requests mixed, planned on one usage."""
    service = Service()
    small = [service.ask() for _ in range(4)]
    big = [service.ask(BIG) for _ in range(5)]
    service.run()
    got = [n for n in small + big if "destinations" in (service.answer(n) or {})]
    failed = [n for n in small + big if "error" in (service.answer(n) or {})]
    assert len(got) + len(failed) == 9 and service.pending() == []
    used = sum(service.placement.get_usages(rp)["VCPU"] for rp in service.hosts)
    assert all(n in got for n in small)  # first come, first served
    assert used == 4 + 2 * (len(got) - 4) and len(got) >= 7
    assert all(service.answer(n)["error"]["kind"] == "no_valid_host" for n in failed)
    service.check_no_overcommit()


def test_a_claim_conflict_splits_the_batch_and_fails_no_innocent_request():
    service = Service()
    names = [service.ask() for _ in range(6)]
    real = service.placement.claim_many
    refused = []

    def refuse_the_first(claims, *args, **kwargs):
        if not refused:  # another scheduler took capacity meanwhile
            refused.append(len(claims))
            service.placement.conflicts += 1
            raise ConflictError("refused", 409, "placement.concurrent_update")
        return real(claims, *args, **kwargs)

    service.placement.claim_many = refuse_the_first
    service.run()
    assert refused == [6]
    assert all(len(placed(service, n)) == 1 for n in names)
    assert service.batcher.stats["claim_conflicts"] == 1
    service.check_no_overcommit()


def test_a_withdrawn_request_is_not_answered_and_its_claim_is_freed():
    service = Service()
    names = [service.ask() for _ in range(4)]
    withdrawn = names[2]
    real_commit = service.store.commit

    def withdraw_before_the_write(txn):
        if any(op.key.startswith(service.store.keys.hosts()) for op in txn.success) and \
                service.store.get(service.store.keys.queue_request(withdrawn)):
            real_commit(Txn([], [Delete(service.store.keys.queue_request(withdrawn))]))
        return real_commit(txn)

    service.store.commit = withdraw_before_the_write
    service.run()
    assert service.answer(withdrawn) is None and service.pending() == []
    assert all(len(placed(service, n)) == 1 for n in names if n != withdrawn)
    assert instance_uuids(withdrawn, 1)[0] not in service.placement.consumers
    assert len(service.placement.consumers) == 3


def test_a_request_uuid_used_twice_is_refused_alone():
    service = Service()
    first = service.ask()
    service.run()
    again = service.store.keys.queue_request(first)
    service.store.put(messages.SCHEDULE_REQUEST, again,
                      request_message(RequestSpec.build(QUERY), "replay"))
    service.store.delete(service.store.keys.queue_answer(first))
    other = service.ask()
    service.run()
    assert "in use" in service.answer(first)["error"]["message"]
    assert len(placed(service, other)) == 1
    assert len(service.placement.consumers) == 2


def test_transactions_stay_within_max_txn_ops():
    service = Service(hosts=4, etcd_max_txn_ops=16)
    names = [service.ask(count=2) for _ in range(5)]
    before = len(service.store.committed)
    service.run()
    written = service.store.committed[before:]
    assert all(len(t.success) <= 16 and len(t.compare) <= 16 for t in written)
    assert len([t for t in written if t.success]) >= 3
    assert all(len(placed(service, n)) == 2 for n in names)


def test_hostile_entries_are_answered_or_removed_and_the_good_request_is_served():
    service = Service()
    good = service.ask()
    garbage, loud = str(uuidlib.uuid4()), str(uuidlib.uuid4())
    service.store.put_raw(service.store.keys.queue_request(garbage), "{\"query\": [[[[")
    service.store.put_raw(service.store.keys.queue_request(loud), json.dumps(
        {**request_message(RequestSpec.build(QUERY), "x"), "query": "resources=VCPU:1\n"}))
    service.store.put_raw(service.store.keys.queue_requests() + "x/../../hosts", "{}")
    service.run()
    assert len(placed(service, good)) == 1
    for name in (garbage, loud):
        error = service.answer(name)["error"]
        assert error["kind"] == "usage" and "\n" not in error["message"]
    assert service.pending() == []
    assert len(service.placement.consumers) == 1


def test_a_lost_leadership_writes_nothing_and_frees_nothing():
    service = Service()
    service.ask()
    service.store.delete(service.store.keys.leader())  # our lease ran out; another leads
    service.store.commit(Txn([], [messages_put(service.store)]))
    with pytest.raises(LostLeadership):
        service.run()
    # The claim stays for the next leader to find (and free, or keep) - never freed by us,
    # since the new leader may have claimed the same consumer again.
    assert len(service.placement.consumers) == 1
    assert service.store.get_prefix(service.store.keys.hosts())[0] == []


def test_claims_left_by_a_dead_leader_are_freed_and_the_request_served():
    service = Service()
    name = service.ask()
    (uuid,) = instance_uuids(name, 1)
    service.placement.claim(uuid, {service.hosts[0]: {"resources": {"VCPU": 1}}}, "p", "u")
    entries, _ = service.store.get_prefix(service.store.keys.queue_requests())
    service.batcher.free_stale_claims(read_pending(service.store.keys, entries,
                                                   service.settings))
    service.run()
    (destination,) = placed(service, name)
    assert service.placement.consumers[uuid]["allocations"] == destination["allocations"]


def test_a_stale_claim_found_only_by_a_conflict_is_freed_too():
    service = Service()
    name = service.ask()
    (uuid,) = instance_uuids(name, 1)
    service.placement.claim(uuid, {service.hosts[0]: {"resources": {"VCPU": 1}}}, "p", "u")
    service.run()  # 409: consumer exists; freed; left for the next pass
    assert service.pending() == [name]
    service.batcher.not_before.clear()
    service.run()
    assert len(placed(service, name)) == 1


def test_anti_affinity_requests_of_one_batch_see_each_other():
    service = Service(hosts=3)
    names = [service.ask(group=("web", "anti-affinity")) for _ in range(3)]
    service.run()
    hosts = [placed(service, n)[0]["host"] for n in names]
    assert sorted(hosts) == sorted(service.hosts)
    fourth = service.ask(group=("web", "anti-affinity"))
    service.run()
    assert service.answer(fourth)["error"]["kind"] == "no_valid_host"
    other_policy = service.ask(group=("web", "affinity"))
    service.run()
    assert "policy anti-affinity" in service.answer(other_policy)["error"]["message"]


def test_a_request_that_keeps_losing_is_answered_with_a_conflict_after_the_retries():
    service = Service()
    name = service.ask()

    def always_taken(*_args, **_kwargs):
        raise ConflictError("taken", 409, "placement.concurrent_update")

    service.placement.claim = always_taken
    for _ in range(4):
        service.batcher.not_before.clear()
        service.run()
    error = service.answer(name)["error"]
    assert error["kind"] == "conflict" and "3 times" in error["message"]


def test_a_request_too_big_for_the_batch_candidates_is_planned_alone():
    service = Service(hosts=3, candidate_limit=1)
    names = [service.ask() for _ in range(2)]
    service.run()
    hosts = Counter(placed(service, n)[0]["host"] for n in names)
    assert sum(hosts.values()) == 2


def test_a_steady_stream_reuses_the_candidates_minus_what_it_claimed():
    service = Service(hosts=1, vcpu=2)
    asked = []
    real = service.placement.allocation_candidates
    service.placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    first = service.ask()
    service.run()
    second, third = service.ask(), service.ask()
    service.run()
    assert len(placed(service, first)) == len(placed(service, second)) == 1
    assert service.answer(third)["error"]["kind"] == "no_valid_host"
    assert service.placement.conflicts == 0  # the kept answer knew the first claim
    # One batch query, then one fresh one for the request that did not fit the kept
    # answer (and the direct path's own query, and its explanation, for the answer).
    assert len(asked) >= 3 and service.batcher.offers.candidates.reused == 1


def test_a_request_whose_uuid_still_has_an_answer_is_removed_not_looped_on():
    service = Service()
    first = service.ask()
    service.run()
    assert len(placed(service, first)) == 1  # its answer stays until collected (or expires)
    service.store.put(messages.SCHEDULE_REQUEST, service.store.keys.queue_request(first),
                      request_message(RequestSpec.build(BIG), "replay"))
    for _ in range(3):
        service.batcher.not_before.clear()
        service.run()
    assert service.pending() == []
    assert len(service.placement.consumers) == 1


def test_a_request_past_its_clients_deadline_is_never_placed():
    """Its client gave up and could not withdraw it (etcd unreachable from there): once the
    deadline (and the clock skew allowed) passed, it counts on nothing being placed."""
    service = Service()
    late = service.ask(deadline=time.time() - 1)
    fresh = service.ask(deadline=time.time() + 600)
    service.run()
    assert service.answer(late)["error"]["kind"] == "unavailable"
    assert "nothing was placed" in service.answer(late)["error"]["message"]
    assert len(placed(service, fresh)) == 1
    assert instance_uuids(late, 1)[0] not in service.placement.consumers
    assert service.pending() == []


def test_a_request_whose_deadline_passes_while_it_is_claimed_is_not_written(monkeypatch):
    service = Service()
    soon = time.time() + 30
    late, fresh = service.ask(deadline=soon), service.ask(deadline=soon + 600)
    real_claim = service.placement.claim_many

    def slow_claim(*args, **kwargs):  # the deadline passes while Placement answers
        result = real_claim(*args, **kwargs)
        monkeypatch.setattr(time, "time", lambda: soon + 1)
        return result

    monkeypatch.setattr(service.placement, "claim_many", slow_claim)
    service.run()
    assert service.answer(late)["error"]["kind"] == "unavailable"
    assert instance_uuids(late, 1)[0] not in service.placement.consumers  # claim freed
    assert len(placed(service, fresh)) == 1
    uuid = instance_uuids(late, 1)[0]
    assert service.store.get(service.store.keys.location(uuid)) is None


# --- on the hosts' accounts --------------------------------------------------------------------


def accounted_service(**settings) -> Service:
    from tests.unit.scheduler.test_scheduler import account

    service = Service(**settings)
    for rp in service.hosts:
        account(service.placement, service.store, rp)
    return service


def test_a_plain_batch_on_the_accounts_asks_placement_only_for_the_claim():
    service = accounted_service()
    asked = []
    real = service.placement.allocation_candidates
    service.placement.allocation_candidates = lambda q: asked.append(q) or real(q)
    names = [service.ask() for _ in range(5)]
    assert service.run() == 5
    assert asked == [] and service.batcher.offers.on_accounts == 1
    assert [c for c in service.placement.calls if c.startswith("claim")] == ["claim_many 5"]
    assert all(placed(service, name) for name in names)
    # The next pass (the accounts not republished: no compute runs) counts what we wrote.
    more = [service.ask() for _ in range(7)]  # 12 VCPU in all: exactly full
    service.run()
    assert all(placed(service, name) for name in more)
    assert service.placement.conflicts == 0
    service.check_no_overcommit()


def test_a_claim_refused_on_the_accounts_sends_the_pass_to_placements_candidates():
    service = accounted_service()
    full = service.hosts[0]
    for _ in range(4):  # filled behind its account's back
        service.placement.claim(str(uuidlib.uuid4()), {full: {"resources": {
            "VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}}, "p", "u")
    names = [service.ask() for _ in range(8)]
    service.run()
    for _ in range(5):
        if not service.pending():
            break
        time.sleep(0.3)
        service.run()
    assert all(placed(service, name) for name in names)
    assert service.placement.conflicts >= 1 and service.batcher.offers.on_candidates >= 1
    assert all(d["host"] != full for name in names for d in placed(service, name))
    service.check_no_overcommit()


@pytest.mark.parametrize("host_view", [True, False])
def test_the_service_places_only_on_hosts_of_its_own_network_backend(host_view):
    from tests.unit.scheduler.test_scheduler import account

    service = Service(backend=NEUTRON, host_view=host_view)
    neutron = service.hosts[1]
    service.placement.set_traits(neutron, {trait_of(NEUTRON)})
    for rp in service.hosts:
        account(service.placement, service.store, rp)
    names = [service.ask() for _ in range(3)]
    service.run()
    assert {d["host"] for name in names for d in placed(service, name)} == {neutron}
