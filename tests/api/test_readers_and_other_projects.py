"""Nova's rules through real Keystone tokens, on a representative few of every kind of
thing with an owner (the unit layer holds every rule, tests/unit/api/test_policy.py): a
reader of demo reads demo's server and group but changes neither (403 by the rule, nothing
changed); a member of alt finds neither (404, as a missing one), is refused demo's server's
tags by the rule (Nova finds them in any project) and demo's user's keys."""

from __future__ import annotations

from typing import Any

from tests.api.conftest import Cloud
from tests.api.test_server_actions import boot
from tests.support import wait_for


def refusal(rule: str) -> dict[str, Any]:
    return {"forbidden": {"code": 403,
                          "message": f"Policy doesn't allow {rule} to be performed."}}


def ask(conn: Any, method: str, path: str, body: Any = None,
        version: str = "2.1") -> tuple[int, Any]:
    """A raw request of `conn`'s token: (status, JSON body or None)."""
    answer = conn.compute.request(path, method, json=body, microversion=version,
                                  raise_exc=False)
    return answer.status_code, (answer.json() if answer.content else None)


def test_a_reader_reads_its_projects_server_and_group_and_changes_neither(
        cloud: Cloud) -> None:
    cloud.keystone.add_user("demo-reader", None, "demo", "reader")
    demo, reader = cloud.connect("demo"), cloud.connect("demo-reader", project="demo")
    server = boot(demo, "watched")
    group = demo.compute.create_server_group(name="watched", policy="affinity")
    try:
        server_path, group_path = f"/servers/{server.id}", f"/os-server-groups/{group.id}"
        assert ask(reader, "GET", server_path)[0] == 200
        assert ask(reader, "GET", group_path)[0] == 200
        for method, path, body, rule in (
                ("PUT", server_path, {"server": {"name": "renamed"}}, "servers:update"),
                ("POST", server_path + "/action", {"os-stop": None}, "servers:stop"),
                ("POST", server_path + "/metadata", {"metadata": {"k": "v"}},
                 "server-metadata:create"),
                ("DELETE", group_path, None, "os-server-groups:delete")):
            assert ask(reader, method, path, body) == (
                403, refusal("os_compute_api:" + rule)), rule
        shown = demo.compute.get_server(server.id)
        assert (shown.name, shown.status, shown.metadata) == ("watched", "ACTIVE", {})
        assert demo.compute.get_server_group(group.id).id == group.id
    finally:
        demo.compute.delete_server_group(group)
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_another_projects_member_finds_none_of_its_things_and_may_not_name_them(
        cloud: Cloud) -> None:
    demo, alt = cloud.connect("demo"), cloud.connect("alt")
    server = boot(demo, "private")
    group = demo.compute.create_server_group(name="private", policy="affinity")
    try:
        for method, path in (("GET", f"/servers/{server.id}"),
                             ("DELETE", f"/servers/{server.id}"),
                             ("POST", f"/servers/{server.id}/action")):
            body = {"os-stop": None} if method == "POST" else None
            assert ask(alt, method, path, body) == (404, {"itemNotFound": {
                "code": 404, "message": f"Instance {server.id} could not be found."}})
        for method in ("GET", "DELETE"):
            assert ask(alt, method, f"/os-server-groups/{group.id}") == (404, {
                "itemNotFound": {"code": 404, "message":
                                 f"Instance group {group.id} could not be found."}})
        assert ask(alt, "PUT", f"/servers/{server.id}/tags/mine", version="2.26") == (
            403, refusal("os_compute_api:os-server-tags:update"))
        demo_user = demo.current_user_id
        assert ask(alt, "GET", f"/os-keypairs?user_id={demo_user}", version="2.10") == (
            403, refusal("os_compute_api:os-keypairs:index"))
        assert demo.compute.get_server(server.id).status == "ACTIVE"
        assert ask(demo, "GET", f"/servers/{server.id}/tags", version="2.26") == (
            200, {"tags": []})
    finally:
        demo.compute.delete_server_group(group)
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")
