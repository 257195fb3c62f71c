"""The fake driver keeps a real driver's contract: idempotent per uuid, state on disk."""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers import load_driver
from etcd_compute.drivers.fake import FakeDriver, boot_log, fake_ip
from etcd_compute.errors import BuildError
from tests.support import make_spec

RP = str(uuidlib.uuid4())


def driver_in(tmp_path: Path, **fake: Any) -> FakeDriver:
    config = deep_merge(COMPUTE_DEFAULTS, {"compute": {"state_dir": str(tmp_path / "state")},
                                           "driver": {"name": "fake", "fake": fake}})
    return FakeDriver(config)


def test_build_creates_the_instance_and_returns_its_address(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    result = driver.build(spec)
    assert result == {"ip": fake_ip(spec["uuid"])}
    assert driver.list_instances() == {spec["uuid"]}
    saved = json.loads((driver.root / f"{spec['uuid']}.json").read_text())
    assert (saved["uuid"], saved["host"], saved["result"]) == (spec["uuid"], RP, result)


def test_a_second_build_returns_the_first_result_without_building_again(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    first = driver.build(spec)
    built_at = json.loads((driver.root / f"{spec['uuid']}.json").read_text())["built_at"]
    assert driver.build(spec) == first
    assert json.loads((driver.root / f"{spec['uuid']}.json").read_text())["built_at"] == built_at
    assert driver.list_instances() == {spec["uuid"]}


def test_an_instance_survives_a_new_driver_on_the_same_state(tmp_path):
    spec = make_spec(RP)
    first = driver_in(tmp_path).build(spec)
    again = driver_in(tmp_path)
    assert again.list_instances() == {spec["uuid"]}
    assert again.build(spec) == first


def test_a_broken_fake_hypervisor_fails_every_build_and_leaves_nothing(tmp_path):
    driver = driver_in(tmp_path, fail_builds=True)
    with pytest.raises(BuildError, match="fail_builds"):
        driver.build(make_spec(RP))
    assert driver.list_instances() == set()


def test_a_missing_file_image_fails_the_build(tmp_path):
    driver = driver_in(tmp_path)
    image = f"file://{tmp_path}/no-such-image.qcow2"
    with pytest.raises(BuildError) as caught:
        driver.build(make_spec(RP, image=image))
    assert str(caught.value) == f"image {image} not found"
    assert driver.list_instances() == set()


def test_an_existing_file_image_or_a_remote_one_builds(tmp_path):
    image = tmp_path / "image.qcow2"
    image.write_bytes(b"qcow")
    driver = driver_in(tmp_path)
    driver.build(make_spec(RP, image=f"file://{image}"))
    driver.build(make_spec(RP, image="https://example.invalid/cirros.img"))  # not fetched
    assert len(driver.list_instances()) == 2


def test_destroy_removes_the_instance_and_is_idempotent(tmp_path):
    driver = driver_in(tmp_path)
    keep, gone = make_spec(RP), make_spec(RP)
    driver.build(keep)
    driver.build(gone)
    driver.destroy(gone["uuid"])
    driver.destroy(gone["uuid"])
    driver.destroy(str(uuidlib.uuid4()))  # never built
    assert driver.list_instances() == {keep["uuid"]}


def test_list_instances_sees_only_instance_files(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    driver.build(spec)
    (driver.root / f".{spec['uuid']}.building").write_text("1")
    (driver.root / "notes.txt").write_text("x")
    assert driver.list_instances() == {spec["uuid"]}


def test_console_is_a_boot_log_naming_a_built_instance_and_is_empty_otherwise(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    unknown = str(uuidlib.uuid4())
    assert driver.console(spec["uuid"]) == ""
    driver.build(spec)
    text = driver.console(spec["uuid"])
    assert text == boot_log(spec["uuid"])
    # Several lines, as a real guest's serial console (Tempest reads more than 3 back).
    assert len(text.splitlines()) > 3
    assert text.endswith(f"fake console of {spec['uuid']}: booted\n")
    assert driver.console(unknown) == ""
    driver.destroy(spec["uuid"])
    assert driver.console(spec["uuid"]) == ""


def test_a_slow_build_leaves_no_marker_behind(tmp_path):
    driver = driver_in(tmp_path, build_seconds=0.01)
    spec = make_spec(RP)
    driver.build(spec)
    assert not list(driver.root.glob(".*"))


def test_fake_addresses_are_stable_and_in_test_net_2():
    uuids = [str(uuidlib.uuid4()) for _ in range(200)]
    for uuid in uuids:
        ip = fake_ip(uuid)
        assert ip == fake_ip(uuid)
        prefix, last = ip.rsplit(".", 1)
        assert prefix == "198.51.100" and 1 <= int(last) <= 253


def test_the_fake_driver_is_loaded_by_name_and_describes_itself(tmp_path):
    config = deep_merge(COMPUTE_DEFAULTS, {"compute": {"state_dir": str(tmp_path)},
                                           "driver": {"name": "fake"}})
    driver = load_driver(config)
    assert isinstance(driver, FakeDriver) and driver.check() == "fake"
    driver.close()  # other names: drivers/test_init.py


# --- an operator's actions ------------------------------------------------------------


def guest_events(driver: FakeDriver, uuid: str) -> list[str]:
    log = driver.root / "guests.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return [line.split()[1] for line in lines if line.startswith(uuid)]


def saved(driver: FakeDriver, uuid: str) -> dict[str, Any]:
    return json.loads((driver.root / f"{uuid}.json").read_text())


def test_stop_start_reboot_flip_the_guest_and_log_each_halt_and_run(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    driver.build(spec)
    driver.stop(spec["uuid"])
    driver.stop(spec["uuid"])  # again: nothing happens
    assert spec["uuid"] not in driver.running()
    assert driver.start(spec["uuid"]) == {"ip": fake_ip(spec["uuid"])}
    driver.reboot(spec["uuid"], hard=False)
    assert spec["uuid"] in driver.running()
    assert guest_events(driver, spec["uuid"]) == ["run", "halt", "run", "halt", "run"]


def test_suspend_keeps_the_guests_memory_and_resume_runs_it_from_there(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    uuid = spec["uuid"]
    driver.build(spec)
    driver.suspend(uuid)
    driver.suspend(uuid)  # again (a job run again after a restart): nothing happens
    assert uuid not in driver.running() and saved(driver, uuid)["suspended"] is True
    assert driver.resume(uuid) == {"ip": fake_ip(uuid)}
    assert uuid in driver.running()
    assert saved(driver, uuid)["suspended"] is False and saved(driver, uuid)["resumes"] == 1
    assert guest_events(driver, uuid) == ["run", "halt", "run"]


def test_a_stopped_guest_cannot_be_suspended(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    driver.build(spec)
    driver.stop(spec["uuid"])
    with pytest.raises(BuildError, match="suspend: the guest is not running"):
        driver.suspend(spec["uuid"])
    assert "suspended" not in saved(driver, spec["uuid"])


def test_pause_freezes_the_guest_running_and_unpause_runs_it_on(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    uuid = spec["uuid"]
    driver.build(spec)
    driver.pause(uuid)
    driver.pause(uuid)  # again (a job run again after a restart): nothing happens
    # Its domain stays up (libvirt's PAUSED is active): not halted, no new run.
    assert uuid in driver.running() and saved(driver, uuid)["paused"] is True
    assert driver.diagnostics(uuid)["state"] == "paused"
    assert driver.unpause(uuid) == {"ip": fake_ip(uuid)}
    driver.unpause(uuid)  # again: running on, nothing to count
    assert saved(driver, uuid)["paused"] is False and saved(driver, uuid)["unpauses"] == 1
    assert guest_events(driver, uuid) == ["run"]


def test_a_paused_guest_powered_off_is_paused_no_more_and_cannot_be_unpaused(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    uuid = spec["uuid"]
    driver.build(spec)
    driver.pause(uuid)
    assert driver.fence() == [uuid]  # its memory is gone with the power
    assert saved(driver, uuid)["paused"] is False and uuid not in driver.running()
    for action in ("pause", "unpause"):
        with pytest.raises(BuildError, match=f"{action}: the guest is not running"):
            getattr(driver, action)(uuid)
    driver.power_on(uuid)
    driver.pause(uuid)
    driver.reboot(uuid, hard=True)  # a paused guest's reboot starts it afresh
    assert saved(driver, uuid)["paused"] is False and uuid in driver.running()


def test_resize_and_rebuild_change_the_instance_and_keep_it_powered_as_asked(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    driver.build(spec)
    bigger = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}
    driver.resize({**spec, "resources": bigger}, power_on=False)
    assert saved(driver, spec["uuid"])["resources"] == bigger
    assert spec["uuid"] not in driver.running()
    driver.rebuild({**spec, "image": {"url": "file:///dev/zero", "sha256": None}}, True)
    assert saved(driver, spec["uuid"])["image"] == "file:///dev/zero"
    assert spec["uuid"] in driver.running()


def test_a_rebuild_from_a_missing_image_is_the_requests_fault_and_touches_nothing(tmp_path):
    from etcd_compute.errors import RequestError

    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    driver.build(spec)
    with pytest.raises(RequestError, match="not found"):
        driver.rebuild({**spec, "image": {"url": "file:///no/such", "sha256": None}}, True)
    assert guest_events(driver, spec["uuid"]) == ["run"]


def test_failing_actions_change_nothing_and_missing_instances_fail(tmp_path):
    driver = driver_in(tmp_path, fail_actions=["resize"])
    spec = make_spec(RP)
    driver.build(spec)
    with pytest.raises(BuildError, match="cannot resize"):
        driver.resize({**spec, "resources": {"VCPU": 4}}, True)
    assert saved(driver, spec["uuid"])["resources"] == spec["resources"]
    with pytest.raises(BuildError, match="does not exist on this host"):
        driver.stop(str(uuidlib.uuid4()))


def test_a_stopped_build_never_runs(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP, stopped=True)
    driver.build(spec)
    assert spec["uuid"] in driver.list_instances() and spec["uuid"] not in driver.running()
    assert guest_events(driver, spec["uuid"]) == []


# -- moving a guest to another fake host ----------------------------------------------------


def two_hosts(tmp_path: Path, **fake: Any) -> tuple[FakeDriver, FakeDriver]:
    return driver_in(tmp_path / "a", **fake), driver_in(tmp_path / "b", **fake)


def test_a_live_move_halts_the_guest_here_before_it_runs_there(tmp_path):
    from tests.compute.guests import overlaps, run_intervals, timeline

    a, b = two_hosts(tmp_path)
    spec = make_spec(RP)
    a.build(spec)
    uuid, there = spec["uuid"], str(uuidlib.uuid4())
    target = b.prepare_incoming({**spec, "host": there})
    assert a.live_migrate(uuid, target)["downtime_ms"] == 0
    assert uuid not in a.list_instances() and uuid in b.running()
    assert saved(b, uuid)["host"] == there
    configs = [{"compute": {"state_dir": str(tmp_path / h / "state")}} for h in "ab"]
    assert overlaps(configs) == []
    assert [host for host, *_ in run_intervals(timeline(configs))[uuid]] == [RP, there]
    assert not list(b.root.glob(".*incoming"))


def test_a_live_move_cancelled_or_failing_leaves_the_guest_running_here(tmp_path):
    import threading

    a, b = two_hosts(tmp_path, action_seconds=5.0)
    spec = make_spec(RP)
    a.build(spec)
    uuid = spec["uuid"]
    target = b.prepare_incoming(spec)
    seen: list[dict[str, Any]] = []
    threading.Timer(0.2, lambda: seen.append(a.migration_progress(uuid)) or
                    a.abort_migration(uuid)).start()
    with pytest.raises(BuildError, match="cancelled; the guest runs on here"):
        a.live_migrate(uuid, target)
    assert seen[0]["percent"] >= 0 and a.migration_progress(uuid) is None
    assert a.abort_migration(uuid) is False  # none running now
    assert uuid in a.running() and uuid not in b.list_instances()
    b.discard_incoming(uuid)
    with pytest.raises(BuildError, match="made no room"):
        driver_in(tmp_path / "a").live_migrate(uuid, target)
    failing = driver_in(tmp_path / "a", fail_actions=["migrate"])
    with pytest.raises(BuildError, match="cannot migrate"):
        failing.live_migrate(uuid, b.prepare_incoming(spec))
    assert uuid in a.running()


def test_a_cold_move_stops_here_defines_there_and_keeps_this_copy_until_confirmed(tmp_path):
    a, b = two_hosts(tmp_path)
    spec = make_spec(RP)
    a.build(spec)
    uuid, there = spec["uuid"], str(uuidlib.uuid4())
    moved = a.send_stopped(uuid, b.prepare_incoming({**spec, "host": there}))
    assert moved["was_running"] and uuid not in a.running() and uuid in a.list_instances()
    b.finish_incoming({**spec, "host": there}, moved, power_on=True)
    assert uuid in b.running() and saved(b, uuid)["host"] == there
    a.destroy(uuid)  # confirmed
    assert uuid not in a.list_instances()
    # Reverted before it finished: discarded there, started here again.
    back = b.send_stopped(uuid, a.prepare_incoming(spec))
    a.discard_incoming(uuid)
    assert back["was_running"] and b.power_on(uuid) and uuid in b.running()
    with pytest.raises(BuildError, match="runs on this host"):
        b.discard_incoming(uuid)
    with pytest.raises(BuildError, match="nothing arrived"):
        a.finish_incoming(spec, back, power_on=True)


def test_a_guest_already_here_is_not_prepared_for(tmp_path):
    a = driver_in(tmp_path)
    spec = make_spec(RP)
    a.build(spec)
    with pytest.raises(BuildError, match="already has a guest"):
        a.prepare_incoming(spec)


def test_a_guest_built_without_a_network_has_no_address_whatever_it_does(tmp_path):
    driver = driver_in(tmp_path)
    spec = {**make_spec(RP), "network": False}
    assert driver.build(spec) == {"ip": None}
    assert driver.reboot(spec["uuid"], hard=True) == {"ip": None}
    driver.stop(spec["uuid"])
    assert driver.start(spec["uuid"]) == {"ip": None}
    other = make_spec(RP)
    assert driver.build(other) == {"ip": fake_ip(other["uuid"])}


def test_diagnostics_are_the_fake_guests_size_and_power_in_novas_shape(tmp_path):
    from etcd_compute import messages

    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    assert driver.diagnostics(spec["uuid"]) is None
    driver.build(spec)
    found = driver.diagnostics(spec["uuid"])
    assert found["state"] == "running" and found["num_cpus"] == spec["resources"]["VCPU"]
    assert found["memory_details"]["maximum"] == spec["resources"]["MEMORY_MB"]
    assert found["num_nics"] == 1 and found["hypervisor"] == "fake"
    messages.check(messages.CONSOLE, {"uuid": spec["uuid"], "text": "", "updated_at": 1.0,
                                      "diagnostics": found})
    driver.stop(spec["uuid"])
    assert driver.diagnostics(spec["uuid"])["state"] == "shutdown"


def test_security_groups_are_the_guests_flag_its_power_untouched(tmp_path):
    driver = driver_in(tmp_path)
    spec = make_spec(RP)
    uuid = spec["uuid"]
    driver.build(spec)
    assert saved(driver, uuid)["security_groups"] is None  # built as every guest: default
    driver.set_security_groups(spec, [])
    assert saved(driver, uuid)["security_groups"] == [] and uuid in driver.running()
    driver.set_security_groups(spec, ["default"])
    assert saved(driver, uuid)["security_groups"] == ["default"]
    assert guest_events(driver, uuid) == ["run"]  # never stopped for it
    rebuilt = {**make_spec(RP), "security_groups": []}  # a build elsewhere keeps them
    driver.build(rebuilt)
    assert saved(driver, rebuilt["uuid"])["security_groups"] == []
    failing = driver_in(tmp_path / "b", fail_actions=["security-groups"])
    failing.build(spec)
    with pytest.raises(BuildError, match="cannot security-groups"):
        failing.set_security_groups(spec, [])
    assert saved(failing, uuid)["security_groups"] is None


def test_on_neutron_ports_the_guest_is_plugged_with_ovsdb_and_has_no_address_of_its_own(
        tmp_path, monkeypatch):
    """Its address is its port's (the worker takes it); its NICs go to the host's switch at
    driver.fake.ovsdb on build, and off it on destroy."""
    from etcd_compute.drivers import fake_vifs

    calls: list[tuple[str, Any, str]] = []
    monkeypatch.setattr(fake_vifs, "plug", lambda db, uuid, vifs: calls.append(
        ("plug", db, uuid)) if db and vifs else None)
    monkeypatch.setattr(fake_vifs, "unplug", lambda db, uuid: calls.append(
        ("unplug", db, uuid)))
    driver = driver_in(tmp_path, ovsdb="unix:/x/db.sock")
    spec = {**make_spec(RP), "vifs": [{"port_id": RP, "mac": "fa:16:3e:00:00:01",
                                       "mtu": None, "bridge": "br-int"}]}
    assert driver.build(spec) == {"ip": None}
    driver.destroy(spec["uuid"])
    assert calls == [("plug", "unix:/x/db.sock", spec["uuid"]),
                     ("unplug", "unix:/x/db.sock", spec["uuid"])]


def test_without_ovsdb_nothing_is_plugged(tmp_path, monkeypatch):
    from etcd_compute.drivers import fake_vifs

    monkeypatch.setattr(fake_vifs.subprocess, "run", lambda *a, **k: pytest.fail("ran"))
    driver = driver_in(tmp_path)
    spec = {**make_spec(RP), "vifs": [{"port_id": RP, "mac": "fa:16:3e:00:00:01"}]}
    driver.build(spec)
    driver.destroy(spec["uuid"])
