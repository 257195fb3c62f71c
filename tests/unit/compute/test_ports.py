"""compute/ports.py against a Neutron in memory (tests/unit/fake_neutron.py, as the service
user sees it): the ports a guest gets (made for it, or the user's own bound), what the
service user refuses on the project's behalf, waiting until they are up, and their release
with the guest."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etcd_compute.compute import ports
from etcd_compute.errors import BuildError, NeutronUnavailable, RequestError
from tests.support import make_spec
from tests.unit.fake_neutron import ALT, DEMO, FakeNeutron

HOST = "hv1"


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


def spec(**extra: Any) -> dict[str, Any]:
    return make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO, **extra)


def allocate(neutron: FakeNeutron, state: Path, wanted: dict[str, Any]) -> list[dict[str, Any]]:
    return ports.allocate(neutron.service(), wanted, HOST, state)  # type: ignore[arg-type]


def test_a_port_on_the_one_network_the_project_sees_bound_to_this_host(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    neutron.add_network(ALT)  # another project's: not seen
    wanted = spec()
    (vif,) = allocate(neutron, tmp_path, wanted)
    port = neutron.items["ports"][vif["port_id"]]
    assert port["network_id"] == net["id"] and port["project_id"] == DEMO
    assert port["device_id"] == wanted["uuid"] and port["device_owner"] == "compute:nova"
    assert port["binding:host_id"] == HOST
    assert vif == {"port_id": port["id"], "mac": port["mac_address"], "mtu": 1442,
                   "bridge": "br-int", "ip": port["fixed_ips"][0]["ip_address"],
                   "network_id": net["id"]}
    assert ports.read_ledger(tmp_path, wanted["uuid"]) == {
        "project_id": DEMO, "created": [port["id"]], "bound": []}


def test_a_shared_network_is_seen_too(neutron: FakeNeutron, tmp_path: Path) -> None:
    shared = neutron.add_network(ALT, shared=True)
    (vif,) = allocate(neutron, tmp_path, spec())
    assert vif["network_id"] == shared["id"]


@pytest.mark.parametrize("networks", [0, 2])
def test_no_network_named_and_not_exactly_one_seen_is_refused_in_one_line(
        neutron: FakeNeutron, tmp_path: Path, networks: int) -> None:
    for _ in range(networks):
        neutron.add_network()
    with pytest.raises(RequestError) as refused:
        allocate(neutron, tmp_path, spec())
    assert "\n" not in str(refused.value)
    assert ("sees 2 networks" if networks else "the project has none") in str(refused.value)
    assert neutron.mutations() == []


def test_another_projects_network_is_not_found_and_the_ports_made_before_go(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    """The attack: demo names alt's private network (its uuid learned somehow). The service
    user could make the port there; the project may not."""
    ours, theirs = neutron.add_network(), neutron.add_network(ALT)
    wanted = spec(networks=[{"uuid": ours["id"]}, {"uuid": theirs["id"]}])
    with pytest.raises(RequestError) as refused:
        allocate(neutron, tmp_path, wanted)
    assert str(refused.value) == f"network {theirs['id']} not found"
    assert neutron.items["ports"] == {}
    assert ports.read_ledger(tmp_path, wanted["uuid"]) is None


def test_a_network_the_apis_caller_saw_takes_the_projects_port(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    """An admin's server on another project's network (Tempest's multinode scenario): the
    API checked it with the admin's token and says so (`caller_sees`); the port is the
    server's project's, as Nova makes it."""
    theirs = neutron.add_network(ALT)
    wanted = spec(networks=[{"uuid": theirs["id"], "caller_sees": True}])
    allocate(neutron, tmp_path, wanted)
    (port,) = neutron.items["ports"].values()
    assert port["network_id"] == theirs["id"] and port["project_id"] == wanted["project_id"]


def test_a_fixed_ip_is_asked_for_and_one_taken_is_the_requests_fault(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    (vif,) = allocate(neutron, tmp_path, spec(networks=[{"uuid": net["id"],
                                                         "fixed_ip": "10.0.0.77"}]))
    assert vif["ip"] == "10.0.0.77"
    again = spec(networks=[{"uuid": net["id"], "fixed_ip": "10.0.0.77"}])
    with pytest.raises(RequestError) as refused:
        allocate(neutron, tmp_path, again)
    assert "already allocated" in str(refused.value)
    assert neutron.of_device(again["uuid"]) == []


def test_the_users_own_port_is_bound_with_a_revision_check_and_kept_on_release(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    own = neutron.add_port(net)
    wanted = spec(networks=[{"port": own["id"]}])
    (vif,) = allocate(neutron, tmp_path, wanted)
    assert vif["port_id"] == own["id"]
    bound = neutron.items["ports"][own["id"]]
    assert (bound["device_id"], bound["binding:host_id"]) == (wanted["uuid"], HOST)
    update = next(detail for method, _, detail in neutron.calls if method == "PUT")
    assert update["revision"] == own["revision_number"]  # If-Match: two builds cannot both take it
    assert ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST) == []  # type: ignore[arg-type]
    kept = neutron.items["ports"][own["id"]]
    assert (kept["device_id"], kept["device_owner"], kept["binding:host_id"]) == ("", "", "")
    assert ports.read_ledger(tmp_path, wanted["uuid"]) is None


def test_a_port_of_another_project_or_in_use_is_refused_and_left_as_it_was(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network(shared=True)
    theirs = neutron.add_port(net, project=ALT)
    busy = neutron.add_port(net, device_id="11111111-1111-1111-1111-111111111111")
    for port, why in ((theirs, "not found"), (busy, "is in use by device")):
        with pytest.raises(RequestError) as refused:
            allocate(neutron, tmp_path, spec(networks=[{"port": port["id"]}]))
        assert why in str(refused.value)
        assert neutron.items["ports"][port["id"]]["revision_number"] == 1
    assert neutron.mutations() == []


def test_a_port_named_twice_is_refused(neutron: FakeNeutron, tmp_path: Path) -> None:
    own = neutron.add_port(neutron.add_network())
    with pytest.raises(RequestError, match="named twice"):
        allocate(neutron, tmp_path, spec(networks=[{"port": own["id"]}] * 2))


def test_a_neutron_outage_part_way_leaves_no_port(neutron: FakeNeutron,
                                                  tmp_path: Path) -> None:
    net = neutron.add_network()
    neutron.fail_from["create_port"] = 2
    wanted = spec(networks=[{"uuid": net["id"]}, {"uuid": net["id"]}])
    with pytest.raises(NeutronUnavailable):
        allocate(neutron, tmp_path, wanted)
    assert neutron.items["ports"] == {}


def test_security_groups_are_found_by_name_in_the_project(tmp_path: Path) -> None:
    """A deployment whose policy lets the service user read the projects' groups: a name
    is found in the server's project, not in another's."""
    neutron = FakeNeutron(service_reads_groups=True)
    net = neutron.add_network()
    web = neutron.add_group(DEMO, "web")
    neutron.add_group(ALT, "db")
    (vif,) = allocate(neutron, tmp_path, spec(networks=[{"uuid": net["id"]}],
                                              security_groups=["web"]))
    assert neutron.items["ports"][vif["port_id"]]["security_groups"] == [web["id"]]
    with pytest.raises(RequestError, match="security group 'db' not found"):
        allocate(neutron, tmp_path, spec(networks=[{"uuid": net["id"]}],
                                         security_groups=["db"]))


def test_under_neutrons_default_policy_a_group_id_is_passed_on_and_neutron_checks_it(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    """The service role reads no project's groups: a name is not found; an id (the compute
    API's specs carry ids, checked with the user's token) goes to Neutron, which refuses
    another project's when the port is made: nothing is left."""
    net = neutron.add_network()
    web, theirs = neutron.add_group(DEMO, "web"), neutron.add_group(ALT, "db")
    (vif,) = allocate(neutron, tmp_path, spec(networks=[{"uuid": net["id"]}],
                                              security_groups=[web["id"]]))
    assert neutron.items["ports"][vif["port_id"]]["security_groups"] == [web["id"]]
    with pytest.raises(RequestError, match="security group 'web' not found"):
        allocate(neutron, tmp_path, spec(networks=[{"uuid": net["id"]}],
                                         security_groups=["web"]))
    wanted = spec(networks=[{"uuid": net["id"]}], security_groups=[theirs["id"]])
    with pytest.raises(RequestError) as refused:
        allocate(neutron, tmp_path, wanted)
    assert f"Security group {theirs['id']} does not exist" in str(refused.value)
    assert neutron.of_device(wanted["uuid"]) == []
    assert ports.read_ledger(tmp_path, wanted["uuid"]) is None


def test_release_deletes_what_was_made_and_a_port_made_before_a_crash_but_not_others(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network(shared=True)
    wanted = spec()
    (vif,) = allocate(neutron, tmp_path, wanted)
    # Made by a build cut short before it wrote it down: the project's, naming the server.
    leftover = neutron.add_port(net, device_id=wanted["uuid"])
    # Another project's port naming our server as its device: not ours to delete.
    planted = neutron.add_port(net, project=ALT, device_id=wanted["uuid"])
    deleted = ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST)  # type: ignore[arg-type]
    assert sorted(deleted) == sorted([vif["port_id"], leftover["id"]])
    assert list(neutron.items["ports"]) == [planted["id"]]


def test_release_without_a_ledger_asks_neutron_nothing(neutron: FakeNeutron,
                                                       tmp_path: Path) -> None:
    assert ports.release(neutron.service(), spec()["uuid"], tmp_path, HOST) == []  # type: ignore[arg-type]
    assert neutron.calls == []


def test_a_release_during_an_outage_keeps_the_ledger_for_the_retry(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    neutron.add_network()
    wanted = spec()
    allocate(neutron, tmp_path, wanted)
    neutron.down = True
    with pytest.raises(NeutronUnavailable):
        ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST)  # type: ignore[arg-type]
    neutron.down = False
    assert len(ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST)) == 1  # type: ignore[arg-type]
    assert neutron.items["ports"] == {}


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def sleep(self, seconds: float) -> None:
        self.t += seconds

    def now(self) -> float:
        return self.t


def test_waiting_ends_when_every_port_is_active(neutron: FakeNeutron) -> None:
    port = neutron.add_port(neutron.add_network())
    clock = Clock()

    def sleep(seconds: float) -> None:
        clock.sleep(seconds)
        neutron.items["ports"][port["id"]]["status"] = "ACTIVE"

    waited = ports.wait_until_up(neutron.service(), "u", [port["id"]], 10, True,  # type: ignore[arg-type]
                                 sleep=sleep, now=clock.now)
    assert waited == ports.POLL_SECONDS


@pytest.mark.parametrize("fatal", [True, False])
def test_a_port_still_down_at_the_timeout_fails_the_build_only_if_fatal(
        neutron: FakeNeutron, fatal: bool) -> None:
    port = neutron.add_port(neutron.add_network())
    clock = Clock()

    def wait() -> float:
        return ports.wait_until_up(neutron.service(), "u", [port["id"]], 5, fatal,  # type: ignore[arg-type]
                                   sleep=clock.sleep, now=clock.now)

    if fatal:
        with pytest.raises(BuildError, match=f"port\\(s\\) {port['id']} not up within 5 s"):
            wait()
    else:
        assert wait() == 5
    assert ports.wait_until_up(neutron.service(), "u", [port["id"]], 0, True) == 0  # type: ignore[arg-type]


def test_neutron_down_from_the_start_leaves_no_ledger_and_nothing_to_release(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    neutron.add_network()
    neutron.down = True
    wanted = spec()
    with pytest.raises(NeutronUnavailable):
        allocate(neutron, tmp_path, wanted)
    assert ports.read_ledger(tmp_path, wanted["uuid"]) is None
    # The failed build's cleanup: nothing asked of Neutron, still down.
    assert ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST) == []  # type: ignore[arg-type]


def test_security_groups_of_a_guest_are_set_on_its_ports_in_its_project(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    own = neutron.add_port(net)
    web, theirs = neutron.add_group(DEMO, "web"), neutron.add_group(ALT, "db")
    wanted = spec(networks=[{"uuid": net["id"]}, {"port": own["id"]}])
    made = [vif["port_id"] for vif in allocate(neutron, tmp_path, wanted)]
    service = neutron.service()
    assert ports.set_security_groups(service, wanted, [web["id"]], tmp_path) == made  # type: ignore[arg-type]
    assert [neutron.items["ports"][p]["security_groups"] for p in made] == [[web["id"]]] * 2
    with pytest.raises(RequestError, match="security groups not set"):  # another project's
        ports.set_security_groups(service, wanted, [theirs["id"]], tmp_path)  # type: ignore[arg-type]
    with pytest.raises(RequestError, match="security group 'web' not found"):  # unreadable
        ports.set_security_groups(service, wanted, ["web"], tmp_path)  # type: ignore[arg-type]
    assert [neutron.items["ports"][p]["security_groups"] for p in made] == [[web["id"]]] * 2
    ports.set_security_groups(service, wanted, [], tmp_path)  # type: ignore[arg-type]
    assert [neutron.items["ports"][p]["security_groups"] for p in made] == [[]] * 2


def test_a_build_run_again_takes_the_ports_it_made_and_bound_then(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    own = neutron.add_port(net)
    wanted = spec(networks=[{"uuid": net["id"]}, {"uuid": net["id"]}, {"port": own["id"]}])
    first = allocate(neutron, tmp_path, wanted)
    again = allocate(neutron, tmp_path, wanted)  # the daemon restarted mid-build
    assert again == first and len(neutron.items["ports"]) == 3
    assert ports.read_ledger(tmp_path, wanted["uuid"])["bound"] == [own["id"]]


def test_a_release_leaves_the_servers_ports_bound_to_another_host(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    """This host was down; its guest was rebuilt on another host (an evacuation), with
    ports of the same server bound there. Back, this host destroys its orphan and releases
    its own ports only."""
    net = neutron.add_network()
    own = neutron.add_port(net)
    wanted = spec(networks=[{"uuid": net["id"]}, {"port": own["id"]}])
    (mine, _) = allocate(neutron, tmp_path, wanted)
    elsewhere = neutron.add_port(net, device_id=wanted["uuid"],
                                 **{"binding:host_id": "hv2"})
    neutron.items["ports"][own["id"]]["binding:host_id"] = "hv2"  # bound there again
    assert ports.release(neutron.service(), wanted["uuid"], tmp_path, HOST) == [  # type: ignore[arg-type]
        mine["port_id"]]
    assert set(neutron.items["ports"]) == {own["id"], elsewhere["id"]}
    assert neutron.items["ports"][own["id"]]["device_id"] == wanted["uuid"]


# --- hot-plug (os-interface) ----------------------------------------------------------------

def test_an_attached_port_on_a_network_the_guest_is_on_already_is_a_new_one(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    net = neutron.add_network()
    wanted = spec(networks=[{"uuid": net["id"]}])
    (first,) = allocate(neutron, tmp_path, wanted)
    vif = ports.attach(neutron.service(), wanted, {"uuid": net["id"]}, HOST, tmp_path)  # type: ignore[arg-type]
    assert vif["port_id"] != first["port_id"]
    port = neutron.items["ports"][vif["port_id"]]
    assert (port["device_id"], port["binding:host_id"]) == (wanted["uuid"], HOST)
    assert ports.read_ledger(tmp_path, wanted["uuid"])["created"] == [  # type: ignore[index]
        first["port_id"], vif["port_id"]]


def test_detach_deletes_a_port_made_and_unbinds_the_users(neutron: FakeNeutron,
                                                          tmp_path: Path) -> None:
    net = neutron.add_network()
    wanted = spec(networks=[{"uuid": net["id"]}])
    (made,) = allocate(neutron, tmp_path, wanted)
    own = neutron.add_port(net)
    ports.attach(neutron.service(), wanted, {"port": own["id"]}, HOST, tmp_path)  # type: ignore[arg-type]
    assert neutron.items["ports"][own["id"]]["device_id"] == wanted["uuid"]
    assert ports.detach(neutron.service(), wanted["uuid"], own["id"], tmp_path) is False  # type: ignore[arg-type]
    kept = neutron.items["ports"][own["id"]]
    assert (kept["device_id"], kept["binding:host_id"]) == ("", "")
    assert ports.detach(neutron.service(), wanted["uuid"], made["port_id"], tmp_path) is True  # type: ignore[arg-type]
    assert made["port_id"] not in neutron.items["ports"]
    assert ports.read_ledger(tmp_path, wanted["uuid"]) == {
        "project_id": DEMO, "created": [], "bound": []}


def test_an_attach_of_another_projects_or_a_busy_port_is_refused(neutron: FakeNeutron,
                                                                tmp_path: Path) -> None:
    net = neutron.add_network(shared=True)
    theirs = neutron.add_port(net, project_id=ALT)
    busy = neutron.add_port(net, device_id="11111111-1111-1111-1111-111111111111")
    for port, why in ((theirs, "not found"), (busy, "is in use by device")):
        with pytest.raises(RequestError, match=why):
            ports.attach(neutron.service(), spec(), {"port": port["id"]}, HOST, tmp_path)  # type: ignore[arg-type]
        assert neutron.items["ports"][port["id"]]["revision_number"] == 1


def test_an_attach_run_again_takes_the_port_it_made_then(neutron: FakeNeutron,
                                                         tmp_path: Path) -> None:
    net = neutron.add_network()
    wanted = spec(networks=[{"uuid": net["id"]}])
    (first,) = allocate(neutron, tmp_path, wanted)
    once = ports.attach(neutron.service(), wanted, {"uuid": net["id"]}, HOST, tmp_path,  # type: ignore[arg-type]
                        request_id="r1")
    again = ports.attach(neutron.service(), wanted, {"uuid": net["id"]}, HOST, tmp_path,  # type: ignore[arg-type]
                         request_id="r1")
    assert again["port_id"] == once["port_id"] != first["port_id"]
    other = ports.attach(neutron.service(), wanted, {"uuid": net["id"]}, HOST, tmp_path,  # type: ignore[arg-type]
                         request_id="r2")
    assert other["port_id"] not in (once["port_id"], first["port_id"])
    assert len(neutron.of_device(wanted["uuid"])) == 3



def test_a_guest_rebuilt_here_after_its_host_died_keeps_its_ports_and_addresses(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    """An evacuation: the guest's ports, made by its build on hv2 (dead now), are bound to
    this host, nothing made anew; the user's own is bound here too."""
    net = neutron.add_network()
    own = neutron.add_port(net)
    wanted = spec(networks=[{"uuid": net["id"]}, {"port": own["id"]}])
    made = ports.allocate(neutron.service(), wanted, "hv2", tmp_path / "hv2")  # type: ignore[arg-type]
    before = {p["id"]: p["fixed_ips"] for p in neutron.items["ports"].values()}
    neutron.calls.clear()
    again = allocate(neutron, tmp_path / "hv1", wanted)
    assert [v["port_id"] for v in again] == [v["port_id"] for v in made]
    assert [v["ip"] for v in again] == [v["ip"] for v in made]
    assert not [m for m in neutron.mutations() if m[:2] == ("POST", "ports")]
    assert {p["id"]: p["fixed_ips"] for p in neutron.items["ports"].values()} == before
    assert all(p["binding:host_id"] == HOST for p in neutron.items["ports"].values())
    ledger = ports.read_ledger(tmp_path / "hv1", wanted["uuid"])
    assert ledger["created"] == [made[0]["port_id"]] and ledger["bound"] == [own["id"]]
    # Back, the dead host's release finds none of them bound to it.
    assert ports.release(neutron.service(), wanted["uuid"], tmp_path / "hv2",  # type: ignore[arg-type]
                         "hv2") == []
    assert len(neutron.items["ports"]) == 2
