"""Server groups through the real API: an anti-affinity group on one host takes one member
and refuses the next (no valid host: ERROR, nothing claimed); groups per project."""

from __future__ import annotations

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for


def test_an_anti_affinity_group_takes_one_member_per_host(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    group = conn.compute.create_server_group(name="spread", policy="anti-affinity")
    made = []
    try:
        assert group.policy == "anti-affinity" and group.member_ids == []
        hint = {"group": group.id}
        first = conn.compute.create_server(name="a", flavor_id="1", image_id=IMAGE,
                                           networks="auto", scheduler_hints=hint)
        made.append(first)
        conn.compute.wait_for_server(first, status="ACTIVE", wait=60, interval=0.3)
        second = conn.compute.create_server(name="b", flavor_id="1", image_id=IMAGE,
                                            networks="auto", scheduler_hints=hint)
        made.append(second)
        failed = conn.compute.wait_for_server(second, status="ERROR", failures=[], wait=60,
                                              interval=0.3)
        assert "No valid host" in failed.fault["message"]
        assert conn.compute.get_server_group(group.id).member_ids == [first.id]
        assert cloud.usage("demo")["consumer_count"] == 1  # the refused one holds nothing
        assert [g.id for g in cloud.connect("alt").compute.server_groups()] == []
    finally:
        for server in made:
            conn.compute.delete_server(server)
            conn.compute.wait_for_delete(server, wait=60, interval=0.3)
        conn.compute.delete_server_group(group)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claims freed")


def test_another_projects_group_is_not_found_by_id(cloud: Cloud) -> None:
    """A member of alt naming demo's group gets what a missing group gets (Nova's lookup is
    the caller's project's): 404, and the group is still there."""
    group = cloud.connect("demo").compute.create_server_group(name="mine", policy="affinity")
    try:
        url = f"{cloud.api.endpoint}/os-server-groups/{group.id}"
        for method in ("GET", "DELETE"):
            answer = cloud.session("alt").request(url, method, raise_exc=False)
            assert (answer.status_code, answer.json()) == (404, {"itemNotFound": {
                "code": 404, "message": f"Instance group {group.id} could not be found."}})
        assert cloud.session("demo").get(url).json()["server_group"]["id"] == group.id
    finally:
        cloud.connect("demo").compute.delete_server_group(group)
