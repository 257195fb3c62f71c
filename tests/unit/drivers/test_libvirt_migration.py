"""drivers/libvirt_migration.py with libvirt's test driver (test:///default, in-process) for
the host's own side, and stand-ins for the peer's libvirtd and for the source domain's
migration (the test driver migrates nothing): what a destination prepares, what a source
refuses before anything moves, that a failed or cancelled move leaves one copy, running on
the source, what a cold move checks before defining the guest. Real guests between two
libvirtds over TLS: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path

import libvirt
import pytest

from etcd_compute.drivers import libvirt_migration
from etcd_compute.drivers.libvirt import LibvirtDriver
from etcd_compute.errors import BuildError, RequestError
from tests.support import make_spec
from tests.unit.drivers.migration_world import PEER, RP, Domain, Peer, target

# -- the destination ---------------------------------------------------------------------


def test_a_host_without_a_migration_address_takes_no_guests(test_driver_config, image):
    test_driver_config["driver"]["libvirt"]["migration"]["address"] = None
    with pytest.raises(BuildError, match="migration.address is not set"):
        LibvirtDriver(test_driver_config).prepare_incoming(make_spec(RP, image))


def test_the_destination_makes_room_and_says_where(driver, test_driver_config, image):
    spec = make_spec(RP, image, name="web")
    made = driver.prepare_incoming(spec)
    directory = Path(test_driver_config["compute"]["instances_dir"]) / spec["uuid"]
    assert made == {"address": "10.0.0.1", "instance_dir": str(directory),
                    "base_sha256": None, "dhcp_server": "192.168.123.1", "network": None}
    assert json.loads((directory / "meta.json").read_text())["name"] == "web"
    assert spec["uuid"] not in driver.list_instances()  # no domain before it comes


def test_a_guest_already_here_is_not_prepared_for_again(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match="already has a domain"):
        driver.prepare_incoming(spec)


def test_a_failed_preparation_leaves_nothing(driver, test_driver_config, tmp_path):
    spec = make_spec(RP, f"file://{tmp_path}/missing.qcow2")
    with pytest.raises(RequestError):
        driver.prepare_incoming(spec)
    assert not (Path(test_driver_config["compute"]["instances_dir"]) / spec["uuid"]).exists()


def test_discarding_removes_what_was_prepared_but_never_a_running_guest(driver, test_driver_config,
                                                                         image):
    spec = make_spec(RP, image)
    driver.prepare_incoming(spec)
    driver.discard_incoming(spec["uuid"])
    assert not (Path(test_driver_config["compute"]["instances_dir"]) / spec["uuid"]).exists()
    driver.build(spec)
    with pytest.raises(BuildError, match="runs on this host"):
        driver.discard_incoming(spec["uuid"])
    assert spec["uuid"] in driver.running()


# -- the source: refusals before anything moves ----------------------------------------------


def test_a_bad_target_is_refused_before_anything_moves(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    for bad in ({"address": "x/y"}, {"instance_dir": "rel"}, {"unexpected": 1}):
        with pytest.raises(BuildError, match="bad target"):
            driver.live_migrate(spec["uuid"], {**target("/srv/i"), **bad})
        with pytest.raises(BuildError, match="bad target"):
            driver.send_stopped(spec["uuid"], {**target("/srv/i"), **bad})
    assert spec["uuid"] in driver.running()


def test_a_stopped_guest_does_not_move_live(driver, image):
    spec = make_spec(RP, image)
    driver.build({**spec, "stopped": True})
    with pytest.raises(BuildError, match="not running"):
        driver.live_migrate(spec["uuid"], target("/srv/i"))


def test_a_destination_on_another_base_image_is_refused(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match="base image differs"):
        driver.live_migrate(spec["uuid"], target("/srv/i", base="a" * 64))
    assert spec["uuid"] in driver.running()


def test_an_unreachable_peer_is_one_line(driver, image, monkeypatch):
    spec = make_spec(RP, image)
    driver.build(spec)
    with pytest.raises(BuildError, match=f"libvirtd of {PEER}:"):
        driver.live_migrate(spec["uuid"], target("/nonexistent"))
    assert spec["uuid"] in driver.running()


# -- the source: the move, with the migration itself stood in for -------------------------


def test_a_live_move_sends_the_config_drive_migrates_and_leaves_nothing_here(
        driver, test_driver_config, moving):
    uuid = moving["uuid"]
    done = Domain(uuid, outcome="n/a")
    moving["peer"].there = done
    done.jobStats = lambda flags=0: {"downtime": 42, "data_total": 10, "time_elapsed": 900}
    result = driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert result["downtime_ms"] == 42 and result["elapsed_ms"] == 900
    assert [list(files) for files in moving["sent"]] == [["config.iso"],
                                                         ["console.history.log"]]
    downtime, call = moving["domain"].calls
    assert downtime == ("downtime", 500)  # allowed before the job: none held behind it
    assert call[1] == f"qemu+tls://{PEER}/system?pkipath={test_driver_config['driver']['libvirt']['migration']['pki_dir']}"
    assert call[2][libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] == ["vda"]
    assert f"/srv/{uuid}/disk.qcow2" in call[2][libvirt.VIR_MIGRATE_PARAM_DEST_XML]
    assert not (Path(test_driver_config["compute"]["instances_dir"]) / uuid).exists()
    assert moving["peer"].closed


def test_a_failed_live_move_leaves_the_guest_running_here_and_its_files(driver, test_driver_config,
                                                                        moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "failed"
    with pytest.raises(BuildError, match="Lost connection.*the guest runs on here"):
        driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert (Path(test_driver_config["compute"]["instances_dir"]) / uuid).exists()
    assert moving["peer"].closed


def test_a_copy_the_destination_started_is_destroyed_when_the_source_runs(driver, moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "failed"
    there = Domain(uuid)
    there.destroy = lambda: setattr(there, "active", False)
    moving["peer"].there = there
    with pytest.raises(BuildError):
        driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    assert not there.active and moving["domain"].active


def test_a_move_reported_failed_that_left_the_guest_running_only_there_is_a_move(driver,
                                                                                 moving):
    uuid = moving["uuid"]
    moving["domain"].outcome = "moved-but-failed"
    moving["peer"].there = Domain(uuid)
    assert "seconds" in driver.live_migrate(uuid, target(f"/srv/{uuid}"))


def test_a_cancel_stops_the_job_of_the_guest(driver, moving):
    aborted = []
    moving["domain"].abortJob = lambda: aborted.append(True)
    assert driver.abort_migration(moving["uuid"]) is True and aborted
    assert driver.abort_migration(str(uuidlib.uuid4())) is False


def test_progress_is_none_without_a_job_and_libvirt_s_figures_with_one(driver, moving):
    assert driver.migration_progress(moving["uuid"]) is None
    moving["domain"].jobStats = lambda flags=0: {
        "type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "data_total": 100, "data_remaining": 25}
    assert driver.migration_progress(moving["uuid"])["percent"] == 75.0


def test_the_supervisor_watches_on_a_connection_of_its_own(driver, image):
    spec = make_spec(RP, image)
    driver.build(spec)
    domain = driver.connection.lookupByName(spec["uuid"])
    connection, watched = driver._watched(domain)
    try:
        assert connection is not driver.connection
        assert watched.connect() is connection and watched.UUIDString() == domain.UUIDString()
    finally:
        connection.close()


def test_the_move_is_watched_on_the_supervisor_s_connection_and_that_one_closed(
        driver, moving, monkeypatch):
    uuid = moving["uuid"]
    moving["peer"].there = Domain(uuid, outcome="n/a")
    watcher, watched = Peer(), Domain(uuid)
    monkeypatch.setattr(driver, "_watched", lambda domain: (watcher, watched))
    supervised = []
    real = libvirt_migration.Supervisor
    monkeypatch.setattr(libvirt_migration, "Supervisor",
                        lambda domain, *args, **kwargs: supervised.append(domain) or
                        real(domain, *args, **kwargs))
    driver.live_migrate(uuid, target(f"/srv/{uuid}"))
    # Never the migration's own domain: its connection can hold the supervisor's calls.
    assert supervised == [watched] and watched is not moving["domain"]
    assert watcher.closed


def test_the_data_to_copy_is_the_memory_and_the_written_disk(moving):
    assert libvirt_migration._data_to_copy(moving["domain"], ["vda"]) == (128 + 5) << 20


@pytest.mark.parametrize("state, reason, destroyed", [
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_MIGRATION, True),  # still incoming
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_USER, False),  # arrived paused
    (libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_RUNNING_MIGRATED, False),  # switched
])
def test_the_last_resort_destroys_only_a_copy_still_waiting_for_the_guest(state, reason,
                                                                          destroyed):
    there = Domain(str(uuidlib.uuid4()))
    there.state = lambda: [state, reason]
    there.destroy = lambda: setattr(there, "active", False)
    libvirt_migration._end_incoming(Peer(there), there.uuid)
    assert there.active is not destroyed
