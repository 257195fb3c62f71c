"""A create: quota, scheduling, views; hostnames as Nova sanitizes them; nothing left by
a refusal; a recheck that fails destroys what was made."""

from __future__ import annotations

import pytest

from etcd_compute.api.objects.builds import Build, hostname_of
from etcd_compute.api.objects.flavors import Flavor
from etcd_compute.api.objects.images import Image
from etcd_compute.api.objects.quotas import OverQuota
from tests.unit.api.harness import Harness

FLAVOR = Flavor("1", "m1.tiny", vcpus=1, ram=256, disk=1)


@pytest.mark.parametrize("name,count,hostname", [
    ("My Web_Server.1", 1, "my-web-server-1"), ("---", 1, None), ("ünï", 1, "n"),
    ("x" * 80, 1, "x" * 63), ("x" * 80, 12, "x" * 60), ("a b", 3, "a-b")])
def test_hostnames_are_novas_sanitized_display_names(name, count, hostname):
    assert hostname_of(name, count) == hostname


def build(**more) -> Build:
    return Build(project_id="p1", user_id="u1", name="web", flavor=FLAVOR,
                 image=Image("file:///dev/null", url="file:///dev/null"), **more)


def test_a_create_makes_every_instance_with_its_view():
    harness = Harness.new()
    harness.add_host()
    docs, reservation = harness.backend.builds.create(build(min_count=2, max_count=3))
    assert [d["name"] for d in docs] == ["web-1", "web-2", "web-3"]
    assert {d["reservation_id"] for d in docs} == {reservation}
    assert [d["hostname"] for d in docs] == ["web-1", "web-2", "web-3"]
    assert len(harness.placement.consumers) == 3
    assert harness.store.get_prefix(harness.store.keys.quota_reservations("p1"))[0] == []


def test_over_quota_writes_nothing():
    harness = Harness.new()
    harness.add_host()
    harness.backend.quotas.update("p1", {"instances": 1})
    with pytest.raises(OverQuota):
        harness.backend.builds.create(build(min_count=2, max_count=2))
    assert harness.placement.consumers == {}
    assert harness.store.get_prefix(harness.store.keys.servers())[0] == []


def test_a_failed_recheck_destroys_what_was_made(monkeypatch):
    harness = Harness.new()
    harness.add_host()

    def over(_reservation):
        raise OverQuota("Quota exceeded for instances: lowered meanwhile")

    monkeypatch.setattr(harness.backend.quotas, "recheck", over)
    with pytest.raises(OverQuota):
        harness.backend.builds.create(build())
    locations, _ = harness.store.get_prefix(harness.store.keys.locations())
    assert len(locations) == 1  # made, and asked to go: its host destroys it
    uuid = locations[0].key.rsplit("/", 1)[-1]
    host = harness.backend.servers.get(uuid).host
    spec = harness.store.get(harness.store.keys.spec(host, uuid)).value
    assert b'"action":"destroy"' in spec


def test_every_thread_s_scheduler_shares_one_cache_of_the_hosts_messages():
    # A copy a thread was ~5 MB at 1000 hosts: 16 threads held 236 MB (bench, issue 22).
    import threading

    harness = Harness.new()
    harness.add_host()
    builds = harness.backend.builds
    builds.create(build())
    schedulers = [builds.scheduler]
    other = threading.Thread(target=lambda: schedulers.append(builds.scheduler))
    other.start()
    other.join()
    first, second = schedulers
    assert first is not second  # per-request state stays per thread
    assert first._decoded is second._decoded
    assert first._decoded, "the create read the hosts' messages through the shared cache"
