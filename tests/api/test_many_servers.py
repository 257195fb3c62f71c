"""Twenty servers created at once with openstacksdk, each waited for with
`wait_for_server`, then deleted: Placement holds exactly the project's twenty claims while
they live and nothing after; the API's views, locations and reservations go with them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for

COUNT = 20


@pytest.fixture
def room_for_twenty(cloud: Cloud) -> Iterator[str]:
    admin, demo = cloud.session("admin"), cloud.project_id("demo")
    url = f"{cloud.api.endpoint}/os-quota-sets/{demo}"
    admin.put(url, json={"quota_set": {"instances": COUNT, "cores": COUNT}}).raise_for_status()
    yield demo
    admin.delete(url)


def _in_threads(count: int, work: Any) -> list[Any]:
    results: list[Any] = [None] * count
    barrier = threading.Barrier(count)

    def run(index: int) -> None:
        barrier.wait()
        try:
            results[index] = work(index)
        except Exception as exc:  # noqa: BLE001 (reported by the test)
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


def test_twenty_servers_at_once_usage_exact_during_and_zero_after(
        cloud: Cloud, room_for_twenty: str) -> None:
    connections = [cloud.connect("demo") for _ in range(COUNT)]
    for conn in connections:
        conn.authorize()  # tokens first: the race is the API's, not Keystone's

    def create(index: int) -> Any:
        conn = connections[index]
        server = conn.compute.create_server(name=f"many-{index}", flavor_id="1",
                                            image_id=IMAGE, networks="auto")
        return conn.compute.wait_for_server(server, status="ACTIVE", wait=240, interval=1)

    servers = _in_threads(COUNT, create)
    failures = [s for s in servers if isinstance(s, Exception)]
    made = [s for s in servers if not isinstance(s, Exception)]
    try:
        assert not failures, failures[:3]
        assert cloud.usage("demo") == {"consumer_count": COUNT, "VCPU": COUNT,
                                       "MEMORY_MB": 256 * COUNT, "DISK_GB": COUNT}
        listed = list(connections[0].compute.servers())
        assert sorted(s.id for s in listed) == sorted(s.id for s in made)
        assert all(s.status == "ACTIVE" for s in listed)
    finally:
        def delete(index: int) -> Any:
            if index < len(made):
                conn = connections[index]
                conn.compute.delete_server(made[index])
                conn.compute.wait_for_delete(made[index], wait=240, interval=1)
            return None

        deleted = _in_threads(COUNT, delete)
    assert not [d for d in deleted if isinstance(d, Exception)]
    wait_for(lambda: not cloud.usage("demo"), timeout=60, what="every claim freed")
    assert list(connections[0].compute.servers()) == []
    assert cloud.api_keys(f"quota-reservations/{room_for_twenty}") == []
