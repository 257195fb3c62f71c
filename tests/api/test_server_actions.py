"""Server actions through the real API with openstacksdk, a fake-driver compute doing them:
stop, start, suspend, resume, pause, unpause, hard reboot, rebuild, a resize held in Placement until
confirmed (and one reverted), the console output, the instance actions, a server out of
the default security group and back (shown at once, on the guest, kept across a compute
restart); nothing left in Placement after."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.api.conftest import IMAGE, Cloud
from tests.support import wait_for


def boot(conn: Any, name: str, flavor: str = "1") -> Any:
    server = conn.compute.create_server(name=name, flavor_id=flavor, image_id=IMAGE,
                                        networks="auto")
    return conn.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.3)


def settle(cloud: Cloud, conn: Any, server: Any, status: str) -> Any:
    """The server once it shows `status` with no task (the host has done it)."""
    def done() -> Any:
        now = conn.compute.get_server(server.id)
        return now if now.status == status and now.task_state is None else None
    return wait_for(done, timeout=60, interval=0.3, what=f"{server.name} {status}")


def holds(cloud: Cloud) -> dict[str, Any]:
    """The MIGRATION consumers Placement has on the cloud's host (resize holds)."""
    found = cloud.placement.get(f"/resource_providers/{cloud.host}/allocations")
    return {consumer: allocation["resources"]
            for consumer, allocation in found["allocations"].items()
            if cloud.placement.get_allocations(consumer).get("consumer_type") == "MIGRATION"}


def test_power_actions_and_rebuild_show_novas_states(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "power")
    try:
        # The task shows at once, before the host has taken it up: the host is held from
        # the request to the look (a look after its work would show no task either).
        os.kill(cloud.compute.pid, signal.SIGSTOP)
        try:
            conn.compute.stop_server(server)
            asked = conn.compute.get_server(server.id)
        finally:
            os.kill(cloud.compute.pid, signal.SIGCONT)
        assert (asked.status, asked.vm_state, asked.task_state) == (
            "ACTIVE", "active", "powering-off")
        settle(cloud, conn, server, "SHUTOFF")
        conn.compute.start_server(server)
        settle(cloud, conn, server, "ACTIVE")
        conn.compute.reboot_server(server, "HARD")
        settle(cloud, conn, server, "ACTIVE")
        conn.compute.rebuild_server(server, image=IMAGE, name="rebuilt",
                                    metadata={"k": "v"})
        rebuilt = settle(cloud, conn, server, "ACTIVE")
        assert rebuilt.name == "rebuilt" and rebuilt.metadata == {"k": "v"}
        output = conn.compute.get_server_console_output(server)["output"]
        assert f"fake console of {server.id}" in output
        actions = [a.action for a in conn.compute.server_actions(server)]
        assert actions[:5] == ["rebuild", "reboot", "start", "stop", "create"]
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_suspend_keeps_the_guest_and_resume_runs_it_again_as_novas(cloud: Cloud) -> None:
    import json

    conn = cloud.connect("demo")
    server = boot(conn, "sleeper")
    # The fake hypervisor's file of the guest (compute's state_dir, beside compute.log).
    guest = cloud.compute.log_path.parent / "state" / "fake-instances" / f"{server.id}.json"
    try:
        conn.compute.suspend_server(server)
        suspended = settle(cloud, conn, server, "SUSPENDED")
        assert (suspended.vm_state, suspended.power_state) == ("suspended", 4)
        assert json.loads(guest.read_text())["suspended"] is True
        # Nova's check_instance_state: only resume (or delete) from suspended.
        for refused in (conn.compute.start_server, conn.compute.stop_server,
                        conn.compute.suspend_server):
            with pytest.raises(Exception, match="while it is in vm_state suspended"):
                refused(server)
        conn.compute.resume_server(server)
        resumed = settle(cloud, conn, server, "ACTIVE")
        assert (resumed.vm_state, resumed.power_state) == ("active", 1)
        saved = json.loads(guest.read_text())
        assert saved["suspended"] is False and saved["resumes"] == 1  # restored, not booted
        with pytest.raises(Exception, match="while it is in vm_state active"):
            conn.compute.resume_server(server)
        actions = [a.action for a in conn.compute.server_actions(server)]
        assert actions[:3] == ["resume", "suspend", "create"]
        conn.compute.suspend_server(server)
        settle(cloud, conn, server, "SUSPENDED")
    finally:
        conn.compute.delete_server(server)  # from SUSPENDED: its saved memory goes too
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    assert not guest.exists()
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_pause_freezes_the_guest_and_unpause_runs_it_on_as_novas(cloud: Cloud) -> None:
    import json

    conn = cloud.connect("demo")
    server = boot(conn, "frozen")
    guest = cloud.compute.log_path.parent / "state" / "fake-instances" / f"{server.id}.json"
    try:
        conn.compute.pause_server(server)
        paused = settle(cloud, conn, server, "PAUSED")
        assert (paused.vm_state, paused.power_state) == ("paused", 3)
        saved = json.loads(guest.read_text())
        assert saved["paused"] is True and saved["running"] is True  # its domain stays up
        # Nova's check_instance_state: not start, stop, suspend, pause again, resize.
        for refused in (conn.compute.start_server, conn.compute.stop_server,
                        conn.compute.suspend_server, conn.compute.pause_server,
                        lambda s: conn.compute.resize_server(s, "2")):
            with pytest.raises(Exception, match="while it is in vm_state paused"):
                refused(server)
        conn.compute.unpause_server(server)
        unpaused = settle(cloud, conn, server, "ACTIVE")
        assert (unpaused.vm_state, unpaused.power_state) == ("active", 1)
        saved = json.loads(guest.read_text())
        assert saved["paused"] is False and saved["unpauses"] == 1  # ran on, not booted
        with pytest.raises(Exception, match="while it is in vm_state active"):
            conn.compute.unpause_server(server)
        # A hard reboot of a paused server boots it afresh, as Nova's.
        conn.compute.pause_server(server)
        settle(cloud, conn, server, "PAUSED")
        conn.compute.reboot_server(server, "HARD")
        settle(cloud, conn, server, "ACTIVE")
        actions = [a.action for a in conn.compute.server_actions(server)]
        assert actions[:5] == ["reboot", "pause", "unpause", "pause", "create"]
        conn.compute.pause_server(server)
        settle(cloud, conn, server, "PAUSED")
    finally:
        conn.compute.delete_server(server)  # from PAUSED, as Nova's
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    assert not guest.exists()
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_a_resize_holds_the_old_size_until_confirmed(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "grows")
    try:
        conn.compute.resize_server(server, "2")
        resized = conn.compute.wait_for_server(server, status="VERIFY_RESIZE", wait=60,
                                               interval=0.3)
        assert resized.flavor["original_name"] == "m1.small"
        # The project's instances hold the new size; the old one is held apart (Nova's
        # migration consumer), on the same host.
        assert cloud.usage("demo") == {"consumer_count": 1, "VCPU": 2, "MEMORY_MB": 512,
                                       "DISK_GB": 2}
        assert list(holds(cloud).values()) == [{"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}]
        conn.compute.confirm_server_resize(server)
        settle(cloud, conn, server, "ACTIVE")
        assert holds(cloud) == {}
        assert conn.compute.get_server(server.id).flavor["original_name"] == "m1.small"
        actions = [a.action for a in conn.compute.server_actions(server)]
        assert actions[:2] == ["confirmResize", "resize"]
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo"), timeout=30, what="the claim freed")


def test_a_reverted_resize_goes_back_to_the_old_flavor(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "back")
    try:
        conn.compute.resize_server(server, "2")
        conn.compute.wait_for_server(server, status="VERIFY_RESIZE", wait=60, interval=0.3)
        conn.compute.revert_server_resize(server)
        reverted = settle(cloud, conn, server, "ACTIVE")
        assert reverted.flavor["original_name"] == "m1.tiny"
        assert holds(cloud) == {}
        assert cloud.usage("demo") == {"consumer_count": 1, "VCPU": 1, "MEMORY_MB": 256,
                                       "DISK_GB": 1}
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)


def test_a_server_deleted_while_its_resize_waits_leaves_nothing_held(cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "dropped")
    conn.compute.resize_server(server, "2")
    conn.compute.wait_for_server(server, status="VERIFY_RESIZE", wait=60, interval=0.3)
    conn.compute.delete_server(server)
    conn.compute.wait_for_delete(server, wait=60, interval=0.3)
    wait_for(lambda: not cloud.usage("demo") and not holds(cloud), timeout=30,
             what="the claim and the hold freed")


def test_actions_are_refused_as_nova_refuses_them(cloud: Cloud) -> None:
    import openstack.exceptions

    conn = cloud.connect("demo")
    server = boot(conn, "refused")
    try:
        with pytest.raises(openstack.exceptions.ConflictException,
                           match="while it is in vm_state active"):
            conn.compute.start_server(server)
        with pytest.raises(openstack.exceptions.ConflictException,
                           match="while it is in vm_state active"):
            conn.compute.confirm_server_resize(server)
        with pytest.raises(openstack.exceptions.BadRequestException,
                           match="must change flavor"):
            conn.compute.resize_server(server, "1")
        alt = cloud.connect("alt")
        with pytest.raises(openstack.exceptions.NotFoundException):
            alt.compute.stop_server(server.id)
        assert conn.compute.get_server(server.id).status == "ACTIVE"
    finally:
        conn.compute.delete_server(server)
        conn.compute.wait_for_delete(server, wait=60, interval=0.3)


# --- security groups: the one there is, default ----------------------------------------


def groups(conn: Any, server: Any) -> list[str] | None:
    shown = conn.compute.get_server(server.id).security_groups
    return None if shown is None else [group["name"] for group in shown]


def test_default_removed_and_added_back_reaches_the_guest_and_survives_a_restart(
        cloud: Cloud) -> None:
    conn = cloud.connect("demo")
    server = boot(conn, "guarded")
    guest = cloud.compute.log_path.parent / "state" / "fake-instances" / f"{server.id}.json"

    import json

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
