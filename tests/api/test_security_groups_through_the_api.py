"""A server leaves the default security group and joins it again through the real API
(openstacksdk, Keystone tokens), a fake-driver compute swapping the filter: the membership
shows at once in show and detail, reaches the hypervisor (the fake keeps the flag), and
survives a restart of the compute; Nova's 404s for what is not there."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for


def boot(conn: Any, name: str) -> Any:
    server = conn.compute.create_server(name=name, flavor_id="1", image_id=IMAGE,
                                        networks="auto")
    return conn.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)


def groups(conn: Any, server: Any) -> list[str] | None:
    shown = conn.compute.get_server(server.id).security_groups
    return None if shown is None else [group["name"] for group in shown]


def test_default_removed_and_added_back_reaches_the_guest_and_survives_a_restart(
        cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "guarded")
    guest = cloud.compute.log_path.parent / "state" / "fake-instances" / f"{server.id}.json"

    def on_guest() -> list[str] | None:
        return json.loads(guest.read_text()).get("security_groups")

    try:
        assert groups(conn, server) == ["default"]
        assert on_guest() is None  # built as every guest: the default filter
        server.remove_security_group(conn.compute, "default")
        assert groups(conn, server) is None  # at once, as Nova's: no key at all
        wait_for(lambda: on_guest() == [], timeout=30, interval=0.2,
                 what="the guest's filter swapped")
        wait_for(lambda: conn.compute.get_server(server.id).status == "ACTIVE" and
                 groups(conn, server) is None, timeout=30, what="the swap ended")
        detail = [s for s in conn.compute.servers(details=True) if s.id == server.id]
        assert detail[0].security_groups is None
        with pytest.raises(Exception, match="not associated with the instance"):
            server.remove_security_group(conn.compute, "default")
        with pytest.raises(Exception, match="Security group web is not found"):
            server.add_security_group(conn.compute, "web")

        cloud.compute.terminate()  # a compute restart: the instance keeps its groups
        cloud.compute.start()
        wait_for(lambda: cloud.store.get(cloud.store.keys.alive(cloud.host)) is not None,
                 timeout=30, what="the compute back")
        assert groups(conn, server) is None and on_guest() == []

        server.add_security_group(conn.compute, "default")
        assert groups(conn, server) == ["default"]
        wait_for(lambda: on_guest() == ["default"], timeout=30, interval=0.2,
                 what="the guest's filter back")
        actions = [a.action for a in conn.compute.server_actions(server)]
        assert actions[:2] == ["security-groups", "security-groups"]
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")
