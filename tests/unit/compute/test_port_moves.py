"""compute/port_moves.py against a Neutron in memory (tests/unit/fake_neutron.py): a
guest's ports follow it through a move with Neutron's port bindings (an inactive binding
for the destination first, activated at the switch, the source's deleted after; deleted
when the move is off), the ledger with them, nothing made anew."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etcd_compute.compute import port_moves, ports
from etcd_compute.errors import NeutronUnavailable, RequestError
from tests.support import make_spec
from tests.unit.fake_neutron import DEMO, FakeNeutron

UUID = "00000000-0000-0000-0000-0000000000aa"
RP = "00000000-0000-0000-0000-0000000000b1"


@pytest.fixture
def neutron() -> FakeNeutron:
    return FakeNeutron()


def built_on_hv1(neutron: FakeNeutron, tmp_path: Path) -> tuple[dict[str, Any], Path, Path]:
    """A guest built on hv1 on a port made for it and a user's own: its spec, and hv1's and
    hv2's state directories."""
    net = neutron.add_network()
    users = neutron.add_port(net)
    spec = make_spec(RP, uuid=UUID, project_id=DEMO,
                     networks=[{"uuid": net["id"]}, {"port": users["id"]}])
    hv1, hv2 = tmp_path / "hv1", tmp_path / "hv2"
    ports.allocate(neutron.service(), spec, "hv1", hv1)  # type: ignore[arg-type]
    return spec, hv1, hv2


def bindings(neutron: FakeNeutron) -> dict[str, dict[str, str]]:
    """{port: {host: status}} of every port."""
    return {port_id: {b["host"]: b["status"] for b in neutron.service().port_bindings(port_id)}
            for port_id in neutron.items["ports"]}


def addresses(neutron: FakeNeutron) -> dict[str, Any]:
    return {p["id"]: (p["mac_address"], p["fixed_ips"]) for p in neutron.items["ports"].values()}


def test_a_live_move_binds_the_ports_there_at_the_switch_and_keeps_them(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    before, ledger = addresses(neutron), ports.read_ledger(hv1, UUID)
    prepared = port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    assert sorted(prepared) == sorted(neutron.items["ports"])
    assert all(b == {"hv1": "ACTIVE", "hv2": "INACTIVE"} for b in bindings(neutron).values())
    assert all(p["binding:profile"] == {"migrating_to": "hv2"}
               for p in neutron.items["ports"].values())
    assert ports.read_ledger(hv2, UUID) == ledger  # the user's port told from the made one
    moved = port_moves.activate(neutron.service(), UUID, "hv2", "hv1", hv1)  # type: ignore[arg-type]
    assert sorted(moved) == sorted(neutron.items["ports"])
    assert all(b == {"hv2": "ACTIVE"} for b in bindings(neutron).values())
    assert all(not p.get("binding:profile") for p in neutron.items["ports"].values())
    assert addresses(neutron) == before  # nothing made anew: same ids, MACs, addresses
    assert ports.read_ledger(hv1, UUID) is None and ports.read_ledger(hv2, UUID) == ledger
    # A release on the host it left finds nothing of it; the guest's destroy there does.
    assert ports.release(neutron.service(), UUID, hv1, "hv1") == []  # type: ignore[arg-type]
    assert len(neutron.items["ports"]) == 2
    assert ports.release(neutron.service(), UUID, hv2, "hv2") == ledger["created"]  # type: ignore[arg-type]
    (kept,) = neutron.items["ports"].values()  # the user's, unbound
    assert kept["id"] in ledger["bound"] and kept["binding:host_id"] == ""


def test_a_move_called_off_leaves_the_ports_as_they_were_on_the_source(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    port_moves.discard(neutron.service(), UUID, "hv2", hv2)  # type: ignore[arg-type]
    assert all(b == {"hv1": "ACTIVE"} for b in bindings(neutron).values())
    assert all(not p.get("binding:profile") for p in neutron.items["ports"].values())
    assert ports.read_ledger(hv2, UUID) is None and ports.read_ledger(hv1, UUID) is not None
    port_moves.discard(neutron.service(), UUID, "hv2", hv2)  # type: ignore[arg-type]  # again: nothing


def test_a_prepare_refused_part_way_leaves_no_binding_there(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, _hv1, hv2 = built_on_hv1(neutron, tmp_path)
    neutron.fail_from = {"create_port_binding": 2}
    with pytest.raises(NeutronUnavailable):
        port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    assert all(b == {"hv1": "ACTIVE"} for b in bindings(neutron).values())
    assert ports.read_ledger(hv2, UUID) is None


def test_a_port_bound_to_the_destination_already_is_refused(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, hv1, _hv2 = built_on_hv1(neutron, tmp_path)
    with pytest.raises(RequestError, match="bound to this host already"):
        port_moves.prepare(neutron.service(), spec, "hv1", tmp_path / "again")  # type: ignore[arg-type]
    assert all(b == {"hv1": "ACTIVE"} for b in bindings(neutron).values())
    assert ports.read_ledger(hv1, UUID) is not None


def test_the_activation_waits_out_a_short_outage_and_a_long_one_is_only_logged(
        neutron: FakeNeutron, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        neutron.down = len(naps) < 2  # back after the second

    neutron.down = True
    moved = port_moves.activate(neutron.service(), UUID, "hv2", "hv1", hv1,  # type: ignore[arg-type]
                                sleep=nap)
    assert len(moved) == 2 and len(naps) == 2
    assert all(b == {"hv2": "ACTIVE"} for b in bindings(neutron).values())

    spec, hv1, hv2 = built_on_hv1(FakeNeutron(), tmp_path / "b")
    down = FakeNeutron()
    down.down = True
    ports.write_ledger(hv1, UUID, {"project_id": DEMO, "created": ["p"], "bound": []})
    assert port_moves.activate(down.service(), UUID, "hv2", "hv1", hv1,  # type: ignore[arg-type]
                               sleep=lambda _s: None) == []
    assert "activate each by hand" in caplog.text
    assert ports.read_ledger(hv1, UUID) is None  # the guest left: nothing of it here


def test_a_cold_move_binds_the_ports_there_before_the_guest_is_defined(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    vifs = port_moves.arrive(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    assert [v["port_id"] for v in vifs] == [*ports.read_ledger(hv2, UUID)["created"],
                                            *ports.read_ledger(hv2, UUID)["bound"]]
    assert all(v["mtu"] == 1442 and v["bridge"] == "br-int" for v in vifs)
    # The source's binding kept, inactive, until the guest left there.
    assert all(b == {"hv2": "ACTIVE", "hv1": "INACTIVE"} for b in bindings(neutron).values())
    port_moves.leave(neutron.service(), UUID, "hv1", hv1)  # type: ignore[arg-type]
    assert all(b == {"hv2": "ACTIVE"} for b in bindings(neutron).values())
    assert ports.read_ledger(hv1, UUID) is None and ports.read_ledger(hv2, UUID) is not None


def test_a_cold_move_that_fails_as_it_defines_the_guest_gives_the_ports_back(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    port_moves.arrive(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]
    port_moves.discard(neutron.service(), UUID, "hv2", hv2)  # type: ignore[arg-type]
    assert all(b == {"hv1": "ACTIVE"} for b in bindings(neutron).values())
    assert all(not p.get("binding:profile") for p in neutron.items["ports"].values())
    assert ports.read_ledger(hv2, UUID) is None and ports.read_ledger(hv1, UUID) is not None


def test_a_leave_while_the_ports_are_still_bound_here_keeps_them(
        neutron: FakeNeutron, tmp_path: Path) -> None:
    _spec, hv1, _hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.leave(neutron.service(), UUID, "hv1", hv1)  # type: ignore[arg-type]
    assert all(b == {"hv1": "ACTIVE"} for b in bindings(neutron).values())
    assert ports.read_ledger(hv1, UUID) is not None


def test_a_guest_without_ports_moves_without_a_call(neutron: FakeNeutron,
                                                     tmp_path: Path) -> None:
    spec = make_spec(RP, uuid=UUID, project_id=DEMO, network=False)
    assert port_moves.prepare(neutron.service(), spec, "hv2", tmp_path) == []  # type: ignore[arg-type]
    assert port_moves.activate(neutron.service(), UUID, "hv2", "hv1",  # type: ignore[arg-type]
                               tmp_path) == []
    assert neutron.mutations() == [] and ports.read_ledger(tmp_path, UUID) is None


def test_an_activation_that_fails_otherwise_never_fails_the_move(
        neutron: FakeNeutron, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    spec, hv1, hv2 = built_on_hv1(neutron, tmp_path)
    port_moves.prepare(neutron.service(), spec, "hv2", hv2)  # type: ignore[arg-type]

    def odd(_port_id: str, _host: str) -> dict[str, Any]:
        raise KeyError("binding")  # an answer not as expected: the guest runs there anyway

    client = neutron.service()
    monkeypatch.setattr(client, "activate_port_binding", odd)
    assert port_moves.activate(client, UUID, "hv2", "hv1", hv1) == []  # type: ignore[arg-type]
    assert "not activated on hv2" in caplog.text
