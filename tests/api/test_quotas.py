"""Quotas counted from Placement: racing creates of one project never exceed its limit,
directly or through the scheduler service; limits and quota sets as Nova shows them."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.api.conftest import IMAGE, Cloud
from tests.conftest import DaemonProcess
from tests.support import REPO, wait_for


@pytest.fixture
def room_for_five(cloud: Cloud) -> Iterator[str]:
    """demo's instances quota at 5 (an admin's os-quota-sets PUT); reset after."""
    admin, demo = cloud.session("admin"), cloud.project_id("demo")
    url = f"{cloud.api.endpoint}/os-quota-sets/{demo}"
    answer = admin.put(url, json={"quota_set": {"instances": 5}}).json()["quota_set"]
    assert answer["instances"] == 5 and answer["cores"] == 20
    yield demo
    admin.delete(url)


@pytest.fixture(params=["direct", "service"])
def path(request: pytest.FixtureRequest, cloud: Cloud,
         tmp_path: Path) -> Iterator[str]:
    """Requests scheduled by the API itself, or through `schedule.py serve`'s service."""
    if request.param == "direct":
        yield "direct"
        return
    config_path = tmp_path / "serve.yaml"
    config_path.write_text(yaml.safe_dump(cloud.config))
    controller = DaemonProcess([str(REPO / "schedule.py"), "--config", str(config_path),
                                "serve"], tmp_path / "serve.log").start()
    try:
        wait_for(lambda: cloud.store.get(cloud.store.keys.queue_open()) is not None,
                 timeout=30, what="the scheduler service")
        yield "service"
    finally:
        controller.stop()


def _create_all(cloud: Cloud, count: int) -> list[Any]:
    barrier, answers = threading.Barrier(count), [None] * count
    sessions = [cloud._session("demo") for _ in range(count)]
    for session in sessions:
        session.get_token()  # authenticated before the race starts

    def create(index: int) -> None:
        barrier.wait()
        answers[index] = sessions[index].post(
            cloud.api.endpoint + "/servers", raise_exc=False,
            json={"server": {"name": f"racer-{index}", "flavorRef": "1", "imageRef": IMAGE}})

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return answers


def test_sixteen_racing_creates_with_room_for_five_make_exactly_five(
        cloud: Cloud, room_for_five: str, path: str) -> None:
    answers = _create_all(cloud, 16)
    statuses = Counter(a.status_code for a in answers)
    assert statuses == {202: 5, 403: 11}, [a.text for a in answers if a.status_code >= 500]
    for refused in (a for a in answers if a.status_code == 403):
        assert refused.json()["forbidden"]["message"].startswith(
            "Quota exceeded for instances: Requested 1, but already used 5 of 5 instances")
    made = [a.json()["server"]["id"] for a in answers if a.status_code == 202]
    demo = cloud.session("demo")
    try:
        for uuid in made:
            wait_for(lambda u=uuid: demo.get(f"{cloud.api.endpoint}/servers/{u}")
                     .json()["server"]["status"] == "ACTIVE", timeout=60, what=f"{uuid} up")
        assert cloud.usage("demo") == {"consumer_count": 5, "VCPU": 5, "MEMORY_MB": 1280,
                                       "DISK_GB": 5}
        listed = demo.get(cloud.api.endpoint + "/servers").json()["servers"]
        assert sorted(s["id"] for s in listed) == sorted(made)
        limits = demo.get(cloud.api.endpoint + "/limits").json()["limits"]["absolute"]
        assert (limits["maxTotalInstances"], limits["totalInstancesUsed"],
                limits["totalCoresUsed"], limits["totalRAMUsed"]) == (5, 5, 5, 1280)
        detail = demo.get(f"{cloud.api.endpoint}/os-quota-sets/{room_for_five}/detail")
        assert detail.json()["quota_set"]["instances"] == \
            {"in_use": 5, "limit": 5, "reserved": 0}
        assert cloud.api_keys("quota-reservations") == []
    finally:
        for uuid in made:
            demo.delete(f"{cloud.api.endpoint}/servers/{uuid}", raise_exc=False)
        wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=60,
                 what="every claim freed")


def test_min_and_max_count_take_what_the_quota_leaves_all_or_nothing(
        cloud: Cloud, room_for_five: str) -> None:
    demo = cloud.session("demo")
    body = {"server": {"name": "batch", "flavorRef": "1", "imageRef": IMAGE,
                       "min_count": 6, "max_count": 8}}
    refused = demo.post(cloud.api.endpoint + "/servers", json=body, raise_exc=False)
    assert refused.status_code == 403
    assert refused.json()["forbidden"]["message"].startswith(
        "Quota exceeded for instances: Requested 6-8, but already used 0 of 5 instances")
    assert not cloud.usage("demo")
    assert demo.get(cloud.api.endpoint + "/servers").json()["servers"] == []
    body["server"].update(min_count=2, max_count=8, return_reservation_id=True)
    made = demo.post(cloud.api.endpoint + "/servers", json=body)
    reservation = made.json()["reservation_id"]
    servers = demo.get(cloud.api.endpoint + "/servers?reservation_id=" + reservation)
    ids = [s["id"] for s in servers.json()["servers"]]
    try:
        assert len(ids) == 5  # as many as the quota leaves (Nova's), all or nothing
        assert sorted(s["name"] for s in servers.json()["servers"]) == \
            [f"batch-{n}" for n in range(1, 6)]
        assert cloud.usage("demo")["consumer_count"] == 5
    finally:
        for uuid in ids:
            demo.delete(f"{cloud.api.endpoint}/servers/{uuid}", raise_exc=False)
        wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=60,
                 what="every claim freed")
