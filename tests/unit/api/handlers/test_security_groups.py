"""addSecurityGroup, removeSecurityGroup: Nova's checks, then its 404 for a group the
network service does not have (there is none here)."""

from __future__ import annotations

from tests.unit.api.harness import Harness


def test_no_group_exists_to_add_or_remove():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    for action in ("addSecurityGroup", "removeSecurityGroup"):
        answer = harness.action(uuid, {action: {"name": "default"}})
        assert answer.status_int == 404, answer.text
        assert answer.json["itemNotFound"]["message"] == "Security group default not found."
        assert harness.action(uuid, {action: {}}).json["badRequest"]["message"] == \
            "Security group not specified"
        assert harness.action(uuid, {action: {"name": " "}}).status_int == 400
        assert harness.action(uuid, {action: {"name": "default"}},
                              roles=("reader",)).status_int == 403
        assert harness.action(uuid, {action: {"name": "default"}},
                              project="p2").status_int == 404
