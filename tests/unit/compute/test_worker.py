"""compute/worker.py: what runs in the pool's processes: the driver named in the config,
loaded once per worker, and one plain function per job (sent to a forkserver worker by
reference, plain data in and out). The pool itself: test_pool.py."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.compute import worker
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.base import Driver
from etcd_compute.drivers.fake import FakeDriver
from etcd_compute.errors import BuildError, RequestError
from tests.support import make_spec
from tests.unit.fake_neutron import DEMO, FakeNeutron

JOBS = [worker.build, worker.prefetch, worker.destroy, worker.act, worker.list_instances,
        worker.running, worker.power_on, worker.consoles, worker.check]


class Recorder(Driver):
    """Says what it was asked."""

    name = "recorder"

    def __init__(self) -> None:
        super().__init__({})
        self.asked: list[tuple[str, Any]] = []

    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.asked.append(("build", spec["uuid"]))
        return {"ip": "198.51.100.7"}

    def prefetch(self, spec: dict[str, Any]) -> None:
        self.asked.append(("prefetch", spec["uuid"]))
        if spec.get("name") == "unfetchable":
            raise OSError("no such image")

    def destroy(self, uuid: str) -> None:
        self.asked.append(("destroy", uuid))

    def list_instances(self) -> set[str]:
        return {"a", "b"}

    def running(self) -> set[str]:
        return {"a"}

    def power_off(self, uuid: str) -> bool:
        raise AssertionError("workers never power off: a fence runs in the main process")

    def power_on(self, uuid: str) -> bool:
        self.asked.append(("power_on", uuid))
        return True

    def console(self, uuid: str, max_bytes: int = 65536) -> str:
        self.asked.append(("console", (uuid, max_bytes)))
        return f"console of {uuid}"

    def stop(self, uuid: str) -> None:
        self.asked.append(("stop", uuid))

    def start(self, uuid: str) -> dict[str, Any]:
        self.asked.append(("start", uuid))
        return {"ip": "198.51.100.7"}

    def suspend(self, uuid: str) -> None:
        self.asked.append(("suspend", uuid))

    def resume(self, uuid: str) -> dict[str, Any]:
        self.asked.append(("resume", uuid))
        return {"ip": "198.51.100.7"}

    def pause(self, uuid: str) -> None:
        self.asked.append(("pause", uuid))

    def unpause(self, uuid: str) -> dict[str, Any]:
        self.asked.append(("unpause", uuid))
        return {"ip": "198.51.100.7"}

    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        self.asked.append(("reboot", (uuid, hard)))
        return {"ip": "198.51.100.7"}

    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        self.asked.append(("rebuild", (spec["image"]["url"], power_on)))
        return {"ip": "198.51.100.7"}

    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        self.asked.append(("resize", (spec["resources"], power_on)))
        return {"ip": "198.51.100.7"}

    def snapshot(self, spec: dict[str, Any], image_id: str, running: bool) -> dict[str, Any]:
        self.asked.append(("snapshot", (image_id, running)))
        return {"detail": f"image {image_id}"}

    def set_security_groups(self, spec: dict[str, Any], groups: list[str]) -> None:
        self.asked.append(("security-groups", (spec["uuid"], groups)))

    def attach_interface(self, uuid: str, vif: dict[str, Any]) -> None:
        self.asked.append(("attach-interface", (uuid, vif["port_id"])))
        if self.refuse_plug:
            raise BuildError("attach-interface: no PCI slot left")

    def detach_interface(self, uuid: str, port_id: str) -> None:
        self.asked.append(("detach-interface", (uuid, port_id)))

    refuse_plug = False


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    driver = Recorder()
    monkeypatch.setattr(worker, "_driver", driver)
    return driver


def test_a_job_before_the_worker_is_initialised_says_so(monkeypatch):
    monkeypatch.setattr(worker, "_driver", None)
    with pytest.raises(RuntimeError, match="worker not initialised"):
        worker.list_instances()


def test_a_worker_loads_the_configured_driver(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(worker, "_driver", None)
    config = deep_merge(COMPUTE_DEFAULTS, {"compute": {"state_dir": str(tmp_path)},
                                           "driver": {"name": "fake"}})
    worker.init_worker(config)
    assert isinstance(worker.driver(), FakeDriver) and worker.check() == "fake"
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    assert worker.build(spec)["ip"] and worker.list_instances() == {spec["uuid"]}


def test_each_job_is_the_drivers_operation(recorder):
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    assert worker.build(spec) == {"ip": "198.51.100.7"}
    assert worker.destroy("a") is None
    assert worker.power_on("b") is True
    assert (worker.list_instances(), worker.running(), worker.check()) == \
        ({"a", "b"}, {"a"}, "recorder")
    assert recorder.asked == [("build", spec["uuid"]), ("destroy", "a"), ("power_on", "b")]


def test_a_prefetch_that_fails_is_only_cache_missed_the_build_reports_it(recorder):
    good = make_spec("00000000-0000-0000-0000-0000000000aa")
    bad = make_spec("00000000-0000-0000-0000-0000000000aa", name="unfetchable")
    assert worker.prefetch(good) is None and worker.prefetch(bad) is None
    assert recorder.asked == [("prefetch", good["uuid"]), ("prefetch", bad["uuid"])]


def test_a_driver_without_a_cache_prefetches_nothing(tmp_path: Path):
    config = deep_merge(COMPUTE_DEFAULTS, {"compute": {"state_dir": str(tmp_path)},
                                           "driver": {"name": "fake"}})
    fake = FakeDriver(config)
    fake.prefetch(make_spec("00000000-0000-0000-0000-0000000000aa"))
    assert fake.list_instances() == set() and not (tmp_path / "fake-instances" /
                                                   "builds.log").exists()


def test_an_action_is_its_drivers_operation_powered_as_it_began(recorder):
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    uuid, image = spec["uuid"], {"url": "file:///dev/zero", "sha256": None}
    bigger = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}
    assert worker.act(spec, {"action": "stop", "from": "ACTIVE"}) == {}
    worker.act(spec, {"action": "start", "from": "SHUTOFF"})
    assert worker.act(spec, {"action": "suspend", "from": "ACTIVE"}) == {}
    assert worker.act(spec, {"action": "resume", "from": "SUSPENDED"}) == \
        {"ip": "198.51.100.7"}
    assert worker.act(spec, {"action": "pause", "from": "ACTIVE"}) == {}
    assert worker.act(spec, {"action": "unpause", "from": "PAUSED"}) == \
        {"ip": "198.51.100.7"}
    worker.act(spec, {"action": "reboot", "from": "ACTIVE", "hard": True})
    worker.act(spec, {"action": "rebuild", "from": "SHUTOFF", "image": image})
    worker.act(spec, {"action": "rebuild", "from": "ACTIVE"})  # from the spec's own image
    assert worker.act(spec, {"action": "resize", "from": "ACTIVE", "resources": bigger}) == \
        {"ip": "198.51.100.7"}
    snapshot = {"image_id": "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10", "name": "snap1"}
    assert worker.act(spec, {"action": "snapshot", "from": "ACTIVE", "snapshot": snapshot}) \
        == {"detail": f"image {snapshot['image_id']}"}
    worker.act(spec, {"action": "snapshot", "from": "SHUTOFF", "snapshot": snapshot})
    assert worker.act(spec, {"action": "security-groups", "from": "ACTIVE",
                             "security_groups": []}) == {}
    assert recorder.asked == [
        ("stop", uuid), ("start", uuid), ("suspend", uuid), ("resume", uuid),
        ("pause", uuid), ("unpause", uuid),
        ("reboot", (uuid, True)),
        ("rebuild", ("file:///dev/zero", False)), ("rebuild", (spec["image"]["url"], True)),
        ("resize", (bigger, True)), ("snapshot", (snapshot["image_id"], True)),
        ("snapshot", (snapshot["image_id"], False)), ("security-groups", (uuid, []))]
    with pytest.raises(ValueError, match="unknown action 'hibernate'"):
        worker.act(spec, {"action": "hibernate", "from": "ACTIVE"})


def test_a_backup_rotates_the_instances_older_backups_once_it_is_up(recorder, monkeypatch):
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    rotated: list[tuple] = []
    monkeypatch.setattr(worker, "_config", {"glance": {"keystone": {"auth_url": "x"}}})
    monkeypatch.setattr(worker, "GlanceClient", lambda config: ("glance", config))
    monkeypatch.setattr(worker, "rotate_backups",
                        lambda *args: rotated.append(args) or ["old1", "old2"])
    snapshot = {"image_id": "6f1c1a52-3d4e-4c3b-9a55-2b0c6d8e9f10", "name": "b3",
                "rotation": {"backup_type": "daily", "keep": 2}}
    done = worker.act(spec, {"action": "snapshot", "from": "ACTIVE", "snapshot": snapshot})
    assert recorder.asked == [("snapshot", (snapshot["image_id"], True))]
    assert rotated == [(("glance", {"keystone": {"auth_url": "x"}}), spec["uuid"], "daily", 2)]
    assert done["detail"].endswith("rotation deleted 2 older backup(s)")

    def unreachable(*_args):
        from etcd_compute.errors import GlanceUnavailable
        raise GlanceUnavailable("glance down")

    monkeypatch.setattr(worker, "rotate_backups", unreachable)
    # The backup stands: a rotation that fails is logged, the next backup rotates.
    assert worker.act(spec, {"action": "snapshot", "from": "ACTIVE", "snapshot": snapshot}) \
        == {"detail": f"image {snapshot['image_id']}"}


def test_consoles_and_diagnostics_of_several_instances_are_one_job_bounded_each(recorder):
    assert worker.consoles(["a", "b"], 4096) == {
        "a": {"text": "console of a", "diagnostics": None},
        "b": {"text": "console of b", "diagnostics": None}}
    assert recorder.asked == [("console", ("a", 4096)), ("console", ("b", 4096))]
    assert worker.consoles([], 4096) == {}


@pytest.mark.parametrize("job", JOBS, ids=lambda job: job.__name__)
def test_jobs_travel_to_a_worker_by_reference(job):
    """The pool pickles what it sends to a forkserver worker: module-level functions only."""
    assert pickle.loads(pickle.dumps(job)) is job


@pytest.fixture
def on_neutron(recorder: Recorder, monkeypatch: pytest.MonkeyPatch,
               tmp_path: Path) -> tuple[Recorder, FakeNeutron, list[dict[str, Any]]]:
    """A worker of network.backend neutron: the recorder driver (the specs it was asked to
    build kept), a Neutron in memory whose ports go ACTIVE when asked about."""
    neutron = FakeNeutron()
    built: list[dict[str, Any]] = []
    original = recorder.build

    def build(spec: dict[str, Any]) -> dict[str, Any]:
        built.append(spec)
        for port in neutron.items["ports"].values():
            port["status"] = "ACTIVE"  # ovn-controller claimed it once the guest started
        return {**original(spec), "ip": None}

    monkeypatch.setattr(recorder, "build", build)
    monkeypatch.setattr(worker, "_config", deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"name": "hv1", "state_dir": str(tmp_path)},
        "network": {"backend": "neutron"}}))
    monkeypatch.setattr(worker, "neutron", neutron.service)
    return recorder, neutron, built


def test_on_neutron_the_guest_is_built_on_its_ports_and_the_result_names_them(on_neutron):
    recorder, neutron, built = on_neutron
    net = neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    result = worker.build(spec)
    (port,) = neutron.of_device(spec["uuid"])
    assert built[0]["vifs"] == [{"port_id": port["id"], "mac": port["mac_address"],
                                 "mtu": 1442, "bridge": "br-int"}]
    assert result == {"ip": port["fixed_ips"][0]["ip_address"], "ports": [port["id"]]}
    assert port["binding:host_id"] == "hv1"
    worker.destroy(spec["uuid"])
    assert neutron.items["ports"] == {}
    assert recorder.asked[-1] == ("destroy", spec["uuid"])


def test_on_neutron_a_guest_without_a_network_gets_no_port(on_neutron):
    _recorder, neutron, built = on_neutron
    neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO, network=False)
    assert worker.build(spec) == {"ip": None, "ports": []}
    assert built[0]["vifs"] == [] and neutron.mutations() == []


def test_on_neutron_a_guest_without_a_network_needs_no_neutron(on_neutron, monkeypatch):
    """No port to make or release: built and destroyed without a Neutron client (a host
    whose Neutron credential is missing, or whose Neutron is down)."""
    recorder, _neutron, built = on_neutron

    def no_client():
        raise AssertionError("Neutron asked")

    monkeypatch.setattr(worker, "neutron", no_client)
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO, network=False)
    assert worker.build(spec) == {"ip": None, "ports": []}
    worker.destroy(spec["uuid"])
    assert built[0]["vifs"] == [] and recorder.asked[-1] == ("destroy", spec["uuid"])


def test_on_neutron_a_refused_network_builds_nothing(on_neutron):
    recorder, neutron, built = on_neutron
    theirs = neutron.add_network("someone-else")
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": theirs["id"]}])
    with pytest.raises(RequestError, match="not found"):
        worker.build(spec)
    assert built == [] and neutron.items["ports"] == {}


def test_port_ledgers_are_the_instances_whose_ports_are_written_down(on_neutron, tmp_path):
    _recorder, neutron, _built = on_neutron
    neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO)
    worker.build(spec)
    assert worker.port_ledgers() == {spec["uuid"]}
    worker.destroy(spec["uuid"])
    assert worker.port_ledgers() == set()


def test_without_neutron_there_are_no_port_ledgers(recorder, monkeypatch, tmp_path):
    monkeypatch.setattr(worker, "_config", deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path)}}))
    assert worker.port_ledgers() == set()


def test_on_neutron_security_groups_are_the_ports_not_the_drivers(on_neutron):
    recorder, neutron, _built = on_neutron
    net = neutron.add_network()
    web = neutron.add_group(DEMO, "web")
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    assert worker.act(spec, {"action": "security-groups", "security_groups": [web["id"]],
                             "from": "ACTIVE"}) == {}
    (port,) = neutron.of_device(spec["uuid"])
    assert port["security_groups"] == [web["id"]]
    assert not [asked for asked in recorder.asked if asked[0] == "security-groups"]


def test_on_neutron_a_live_move_takes_the_ports_along(on_neutron, monkeypatch, tmp_path):
    recorder, neutron, _built = on_neutron
    net = neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    (port,) = neutron.of_device(spec["uuid"])
    source = worker._config
    monkeypatch.setattr(recorder, "prepare_incoming", lambda asked: recorder.asked.append(
        ("prepare", asked.get("vifs"))) or {"address": "192.0.2.2"}, raising=False)
    monkeypatch.setattr(recorder, "live_migrate", lambda uuid, target, cancelled: recorder.asked
                        .append(("live", target)) or {"downtime_ms": 5}, raising=False)
    # The destination, hv2: an inactive binding there, its name in the target.
    monkeypatch.setattr(worker, "_config", deep_merge(source, {
        "compute": {"name": "hv2", "state_dir": str(tmp_path / "hv2")}}))
    target = worker.move(worker.PREPARE, spec, {})
    assert target == {"address": "192.0.2.2", "ports_host": "hv2"}
    assert ("prepare", []) in recorder.asked  # no libvirt network there: on ports
    assert {b["host"]: b["status"] for b in neutron.service().port_bindings(port["id"])} == {
        "hv1": "ACTIVE", "hv2": "INACTIVE"}
    # The source, hv1: the guest crosses (its target as the driver's), then the ports.
    monkeypatch.setattr(worker, "_config", source)
    done = worker.move(worker.MIGRATE, spec, {"live": True, "target": target})
    assert ("live", {"address": "192.0.2.2"}) in recorder.asked
    assert done == {"figures": {"downtime_ms": 5, "ports_moved": 1}}
    assert neutron.service().port_bindings(port["id"]) == [
        {"host": "hv2", "status": "ACTIVE", "profile": {}}]
    worker.destroy(spec["uuid"])  # a destroy on the host it left deletes nothing
    assert port["id"] in neutron.items["ports"]


def test_on_neutron_a_live_move_connects_to_neutron_before_the_guest_crosses(
        on_neutron, monkeypatch, tmp_path):
    """The activation right after the switch-over is what ends a floating IP's loss (the
    guest's chassis does its NAT only once its binding is active): its client has its
    token and connection before the guest crosses, and is the one that activates."""
    recorder, neutron, _built = on_neutron
    net = neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    source = worker._config
    monkeypatch.setattr(recorder, "prepare_incoming", lambda asked: {"address": "192.0.2.2"},
                        raising=False)
    monkeypatch.setattr(worker, "_config", deep_merge(source, {
        "compute": {"name": "hv2", "state_dir": str(tmp_path / "hv2")}}))
    target = worker.move(worker.PREPARE, spec, {})
    monkeypatch.setattr(worker, "_config", source)
    clients: list[Any] = []
    monkeypatch.setattr(worker, "neutron", lambda: clients.append(neutron.service())
                        or clients[-1])
    seen: dict[str, Any] = {}

    def live(uuid, target, cancelled):
        seen.update(clients=len(clients), calls=list(neutron.calls))
        return {"downtime_ms": 5}

    monkeypatch.setattr(recorder, "live_migrate", live, raising=False)
    done = worker.move(worker.MIGRATE, spec, {"live": True, "target": target})
    assert done["figures"]["ports_moved"] == 1
    assert seen["clients"] == 1 and len(clients) == 1  # made before, used after
    assert seen["calls"][-1] == ("GET", "extensions", {"id": "binding-extended"})


def test_on_neutron_a_move_called_off_drops_the_destination_s_binding(
        on_neutron, monkeypatch, tmp_path):
    recorder, neutron, _built = on_neutron
    net = neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    (port,) = neutron.of_device(spec["uuid"])
    monkeypatch.setattr(worker, "_config", deep_merge(worker._config, {
        "compute": {"name": "hv2", "state_dir": str(tmp_path / "hv2")}}))

    def refuse(_spec):
        raise RequestError("no room")

    monkeypatch.setattr(recorder, "prepare_incoming", refuse, raising=False)
    with pytest.raises(RequestError, match="no room"):  # the driver's refusal: none left
        worker.move(worker.PREPARE, spec, {})
    assert [b["host"] for b in neutron.service().port_bindings(port["id"])] == ["hv1"]
    monkeypatch.setattr(recorder, "prepare_incoming", lambda _s: {"address": "192.0.2.2"},
                        raising=False)
    monkeypatch.setattr(recorder, "discard_incoming", lambda uuid: recorder.asked.append(
        ("discard", uuid)), raising=False)
    worker.move(worker.PREPARE, spec, {})
    worker.move(worker.DISCARD, spec, {})
    assert ("discard", spec["uuid"]) in recorder.asked
    assert [b["host"] for b in neutron.service().port_bindings(port["id"])] == ["hv1"]




def test_on_neutron_a_port_is_made_then_plugged_and_unplugged_then_deleted(on_neutron):
    recorder, neutron, _built = on_neutron
    net, second = neutron.add_network(), neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    done = worker.act(spec, {"action": "attach-interface", "nic": {"uuid": second["id"]},
                             "from": "SHUTOFF"})
    (port,) = [p for p in neutron.of_device(spec["uuid"]) if p["network_id"] == second["id"]]
    assert recorder.asked[-1] == ("attach-interface", (spec["uuid"], port["id"]))
    assert port["id"] in done["detail"]
    worker.act(spec, {"action": "detach-interface", "nic": {"port": port["id"]},
                      "from": "SHUTOFF"})
    assert recorder.asked[-1] == ("detach-interface", (spec["uuid"], port["id"]))
    assert port["id"] not in neutron.items["ports"]


def test_on_neutron_a_failed_plug_gives_the_port_back(on_neutron):
    recorder, neutron, _built = on_neutron
    net = neutron.add_network()
    spec = make_spec("00000000-0000-0000-0000-0000000000aa", project_id=DEMO,
                     networks=[{"uuid": net["id"]}])
    worker.build(spec)
    before = set(neutron.items["ports"])
    recorder.refuse_plug = True
    with pytest.raises(BuildError, match="no PCI slot"):
        worker.act(spec, {"action": "attach-interface", "nic": {"uuid": net["id"]},
                          "from": "ACTIVE"})
    assert set(neutron.items["ports"]) == before


def test_without_neutron_nothing_is_hot_plugged(recorder):
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    with pytest.raises(RequestError, match="network.backend neutron only"):
        worker.act(spec, {"action": "attach-interface", "nic": {"port": "p"},
                          "from": "ACTIVE"})
    assert recorder.asked == []


def test_a_discard_after_a_reverted_cold_move_destroys_the_guest_defined_here(
        recorder, monkeypatch, tmp_path: Path):
    monkeypatch.setattr(worker, "_config", deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"name": "hv2", "state_dir": str(tmp_path)}}))
    monkeypatch.setattr(recorder, "discard_incoming", lambda uuid: recorder.asked.append(
        ("discard", uuid)), raising=False)
    spec = make_spec("00000000-0000-0000-0000-0000000000aa")
    worker.move(worker.DISCARD, spec, {"target": {}})
    assert recorder.asked == [("discard", spec["uuid"])]  # made ready only: never destroyed
    recorder.asked.clear()
    worker.move(worker.DISCARD, spec, {"finished": True})
    assert recorder.asked == [("destroy", spec["uuid"]), ("discard", spec["uuid"])]
