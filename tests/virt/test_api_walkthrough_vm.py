"""The compute API issue's walk-through, with a real guest and the `openstack` command line.

As `etcd-compute-demo` (a member of project demo), through Keystone's catalog, the real
API, Glance and a libvirt compute booting the offline test guest: server create --wait,
list, show, console log show, stop, start, reboot --hard, resize --wait then resize
confirm, rebuild, event list, quota show, limits show --absolute, keypair create, server
group create --policy anti-affinity, delete --wait; `etcd-compute-alt` does not find the
server; as `etcd-compute` (admin): hypervisor list, compute service list, compute service
set --disable (and --enable); `schedule.py list` sees the same instance; Placement holds
nothing of the project after. The compute and its guest are on a hypervisor host of their
own (tools/local_services/hypervisors.py); the commands run in one long-lived `openstack`
per cloud (tests/openstack_shell.py).
"""

from __future__ import annotations

import json

import pytest

from etcd_compute import messages
from etcd_compute.defaults import API_DEFAULTS
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient
from tests.support import run_cli, wait_for
from tests.virt.cloud_walk import Walk, walk  # noqa: F401 (walk: the fixture)

pytestmark = pytest.mark.vm


# The whole walk-through (a real guest booted, stopped, started, rebooted, resized, rebuilt)
# with its fixtures' start (Keystone, Glance, the API): 350 s on a loaded machine.
@pytest.mark.timeout(600)
def test_the_issues_walkthrough_with_a_real_guest(walk: Walk, store: Store,  # noqa: F811
                                                  placement: PlacementClient) -> None:
    demo = "etcd-compute-demo"
    created = walk.osc(demo, "server", "create", "--flavor", "m1.tiny", "--image", walk.image,
                       "--wait", "-f", "json", "walkthrough")
    server = json.loads(created.stdout)["id"]
    try:
        assert walk.field(server, "status") == "ACTIVE"
        listed = json.loads(walk.osc(demo, "server", "list", "-f", "json").stdout)
        assert [s["ID"] for s in listed] == [server]
        shown = json.loads(walk.osc(demo, "server", "show", server, "-f", "json").stdout)
        assert "'m1.tiny'" in repr(shown["flavor"]) and shown["addresses"]
        # The guest's serial console, as its host publishes it.
        wait_for(lambda: "ETCD-COMPUTE-GUEST" in walk.osc(demo, "console", "log", "show",
                                                          server).stdout,
                 timeout=240, interval=2, what="the guest's console")
        connection = walk.hypervisor.connection()
        walk.osc(demo, "server", "stop", server)
        walk.wait_status(server, "SHUTOFF")
        assert not connection.lookupByName(server).isActive()  # the guest, not just a state
        walk.osc(demo, "server", "start", server)
        walk.wait_status(server, "ACTIVE")
        walk.osc(demo, "server", "reboot", "--hard", "--wait", server)
        walk.wait_status(server, "ACTIVE")
        walk.osc(demo, "server", "resize", "--flavor", "m1.small", "--wait", server)
        assert walk.field(server, "status") == "VERIFY_RESIZE"
        walk.osc(demo, "server", "resize", "confirm", server)
        walk.wait_status(server, "ACTIVE")
        assert "m1.small" in walk.field(server, "flavor")
        assert connection.lookupByName(server).maxMemory() == 2048 * 1024  # KiB: m1.small
        walk.osc(demo, "server", "rebuild", "--wait", server)
        walk.wait_status(server, "ACTIVE")
        events = json.loads(walk.osc(demo, "server", "event", "list", server, "-f",
                                     "json").stdout)
        assert [e["Action"] for e in events] == [
            "rebuild", "confirmResize", "resize", "reboot", "start", "stop", "create"]
        # The project's limits are the API's defaults (nobody set its own).
        quota = {row["Resource"]: row["Limit"] for row in json.loads(
            walk.osc(demo, "quota", "show", "-f", "json").stdout)}
        assert {name: quota.get(name) for name in ("instances", "cores", "ram")} == {
            name: API_DEFAULTS["quotas"][name] for name in ("instances", "cores", "ram")}
        limits = json.loads(walk.osc(demo, "limits", "show", "--absolute", "-f",
                                     "json").stdout)
        used = {row["Name"]: row["Value"] for row in limits}
        assert (used["total_instances_used"], used["total_ram_used"]) == (1, 2048)
        walk.osc(demo, "keypair", "create", "walk-key")
        group = json.loads(walk.osc(demo, "server", "group", "create", "--policy",
                                    "anti-affinity", "walk-group", "-f", "json").stdout)
        # What the API kept of it (etcd), and shows again: the policy asked, the server's
        # project, no members.
        kept, _ = store.read(messages.SERVER_GROUP, store.keys.server_group(group["id"]))
        assert kept is not None, group
        assert (kept["name"], kept["policy"], kept["project_id"]) == (
            "walk-group", "anti-affinity", shown["project_id"])
        again = json.loads(walk.osc(demo, "server", "group", "show", group["id"], "-f",
                                    "json").stdout)
        assert (again["name"], again["policy"], again["members"]) == (
            "walk-group", kept["policy"], [])
        # Another project does not find it.
        other = walk.osc("etcd-compute-alt", "server", "show", server, ok=False)
        assert other.returncode != 0 and "No Server found" in other.stderr
        # The admin's views of the hosts.
        # Our host as Placement names it and etcd sees it alive; its libvirt driver: QEMU.
        hypervisors = json.loads(walk.osc("etcd-compute", "hypervisor", "list", "-f",
                                          "json").stdout)
        (seen,) = [h for h in hypervisors if h["ID"] == walk.host]
        provider = placement.get(f"/resource_providers/{walk.host}")
        assert provider["name"] == walk.host_name
        assert store.get(store.keys.alive(walk.host)) is not None
        assert (seen["Hypervisor Hostname"], seen["Hypervisor Type"], seen["State"]) == (
            provider["name"], "QEMU", "up")
        services = json.loads(walk.osc("etcd-compute", "compute", "service", "list", "-f",
                                       "json").stdout)
        (ours,) = [s for s in services if s["Host"] == walk.host_name]
        assert (ours["Binary"], ours["State"], ours["Status"]) == ("nova-compute", "up",
                                                                   "enabled")
        walk.osc("etcd-compute", "compute", "service", "set", "--disable",
                 "--disable-reason", "walkthrough", walk.host_name, "nova-compute")
        services = json.loads(walk.osc("etcd-compute", "compute", "service", "list", "-f",
                                       "json").stdout)
        assert [s["Status"] for s in services if s["Host"] == walk.host_name] == ["disabled"]
        walk.osc("etcd-compute", "compute", "service", "set", "--enable", walk.host_name,
                 "nova-compute")
        # The operator's schedule.py sees the same instance.
        listed = run_cli("schedule.py", "--config", str(walk.schedule_yaml), "list", "--json")
        assert listed.code == 0, listed.stderr
        assert [r["uuid"] for r in json.loads(listed.stdout)
                if r["state"] != "DELETED"] == [server]
        connection.close()
    finally:
        walk.osc(demo, "server", "delete", "--wait", server, ok=False)
        walk.osc(demo, "keypair", "delete", "walk-key", ok=False)
    wait_for(lambda: not placement.get(f"/resource_providers/{walk.host}/allocations")[
        "allocations"], timeout=60, what="the host's allocations freed")
