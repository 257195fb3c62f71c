"""virt/migration.py: the peer's URI, what a destination may tell a source (refusals), the
destination's definition, migrateToURI3's parameters, and the supervisor's bound (a fake
domain and clock). Real migrations: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import threading
import time
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.virt import domain, migration
from etcd_compute.virt.migration import GIB, Limits, Supervisor, Target
from tests import support

UUID = str(uuidlib.uuid4())
SOURCE_DIR = Path("/var/lib/etcd-compute/instances") / UUID
TARGET = Target("10.0.0.2", f"/srv/instances/{UUID}", "a" * 64, "192.168.123.1",
                "etcd-compute-b")


def source_xml(**overrides: Any) -> str:
    values: dict[str, Any] = {
        "disk": SOURCE_DIR / "disk.qcow2", "config_drive": SOURCE_DIR / "config.iso",
        "console_log": SOURCE_DIR / "console.log", "nic_filter": "etcd-compute-guest",
        "dhcp_server": "192.168.124.1", "macs": ("52:54:00:12:34:56",), **overrides}
    return domain.domain_xml(support.domain_spec(UUID, **values))


# -- where -----------------------------------------------------------------------------------


@pytest.mark.parametrize("address, uri", [
    ("10.0.0.2", "qemu+tls://10.0.0.2/system?pkipath=/etc/pki"),
    ("fd00::2", "qemu+tls://[fd00::2]/system?pkipath=/etc/pki"),
    ("hv2.example", "qemu+tls://hv2.example/system?pkipath=/etc/pki"),
])
def test_a_peer_is_reached_over_tls_with_this_host_s_certificates(address, uri):
    assert migration.peer_uri(address, "/etc/pki") == uri


@pytest.mark.parametrize("address", ["", "hv2/system?no_verify=1", "a..b", "-x", "h v",
                                     "hv2?pkipath=/tmp", "host:16509"])
def test_an_address_that_would_change_the_uri_is_refused(address):
    with pytest.raises(ValueError):
        migration.peer_uri(address, "/etc/pki")


def test_the_pki_path_is_quoted_into_the_uri():
    assert migration.peer_uri("10.0.0.2", "/etc/p ki&x=1").endswith("pkipath=/etc/p+ki%26x%3D1")


def test_a_target_round_trips_through_a_message():
    assert Target.from_dict(TARGET.to_dict()) == TARGET


@pytest.mark.parametrize("change", [
    {"address": "10.0.0.2/x"}, {"instance_dir": "relative/dir"},
    {"instance_dir": "/srv/../etc"}, {"base_sha256": "not-a-sha"},
    {"dhcp_server": "gateway"}, {"address": 7}, {"extra": "x"}, {"network": "a b"},
    {"network": "x" * 65},
])
def test_a_target_from_another_host_is_checked(change):
    data = {**TARGET.to_dict(), **change}
    with pytest.raises((ValueError, TypeError)):
        Target.from_dict(data)


def test_a_target_missing_a_key_is_refused():
    data = TARGET.to_dict()
    del data["base_sha256"]
    with pytest.raises(ValueError, match="needs"):
        Target.from_dict(data)


# -- the destination's definition -----------------------------------------------------------


def test_only_writable_file_disks_are_copied_not_the_config_drive():
    assert migration.local_disks(source_xml()) == ["vda"]


def test_the_destination_runs_the_guest_from_its_own_paths_network_and_gateway():
    moved = ET.fromstring(migration.destination_xml(source_xml(), SOURCE_DIR, TARGET))
    files = [e.get("file") for e in moved.iter() if e.tag in ("source", "log") and
             e.get("file")]
    assert files == [f"{TARGET.instance_dir}/disk.qcow2", f"{TARGET.instance_dir}/config.iso",
                     f"{TARGET.instance_dir}/console.log"]
    parameters = {p.get("name"): p.get("value") for p in moved.iter("parameter")}
    assert parameters["DHCPSERVER"] == "192.168.123.1" and "IP" not in parameters
    assert moved.find("devices/interface/source").get("network") == "etcd-compute-b"
    # Identity unchanged: uuid, MAC.
    assert moved.findtext("uuid") == UUID
    assert [m.get("address") for m in moved.iter("mac")] == ["52:54:00:12:34:56"]


def test_what_runs_there_is_bound_to_the_guest_s_address_at_once():
    moved = ET.fromstring(migration.destination_xml(source_xml(), SOURCE_DIR, TARGET,
                                                    "192.168.123.45"))
    parameters = [(p.get("name"), p.get("value")) for p in moved.iter("parameter")]
    assert ("IP", "192.168.123.45") in parameters
    assert ("CTRL_IP_LEARNING", "dhcp") in parameters
    # One IP parameter however often it travels.
    again = migration.destination_xml(ET.tostring(moved, encoding="unicode"),
                                      Path(TARGET.instance_dir), TARGET, "192.168.123.46")
    assert [p.get("value") for p in ET.fromstring(again).iter("parameter")
            if p.get("name") == "IP"] == ["192.168.123.46"]
    with pytest.raises(ValueError):
        migration.destination_xml(source_xml(), SOURCE_DIR, TARGET, "not-an-address")


def test_a_file_outside_the_instance_s_directory_keeps_its_path():
    other = Path(str(SOURCE_DIR) + "-other")  # a sibling whose name starts the same
    xml = source_xml(config_drive=other / "config.iso")
    moved = ET.fromstring(migration.destination_xml(xml, SOURCE_DIR, TARGET))
    assert str(other / "config.iso") in [e.get("file") for e in moved.iter("source")]


def test_the_streams_go_to_the_target_s_address_with_the_disks_and_bandwidth():
    params = migration.migration_params(TARGET, "<domain/>", ["vda"], Limits(bandwidth_mib=64),
                                        "<domain><defined/></domain>")
    assert params[libvirt.VIR_MIGRATE_PARAM_URI] == "tcp://10.0.0.2"
    assert params[libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS] == "10.0.0.2"
    assert params[libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS] == ["vda"]
    assert params[libvirt.VIR_MIGRATE_PARAM_DEST_XML] == "<domain/>"
    assert params[libvirt.VIR_MIGRATE_PARAM_PERSIST_XML] == "<domain><defined/></domain>"
    assert params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] == 64
    v6 = Target("fd00::2", TARGET.instance_dir, None)
    assert migration.migration_params(v6, "<domain/>", [])[libvirt.VIR_MIGRATE_PARAM_URI] == \
        "tcp://[fd00::2]"
    assert libvirt.VIR_MIGRATE_PARAM_BANDWIDTH not in migration.migration_params(
        TARGET, "<domain/>", [], Limits())


def test_migrations_are_peer_to_peer_over_tls_with_the_local_disks_and_converge():
    for flag in (libvirt.VIR_MIGRATE_LIVE, libvirt.VIR_MIGRATE_PEER2PEER,
                 libvirt.VIR_MIGRATE_TLS, libvirt.VIR_MIGRATE_NON_SHARED_INC,
                 libvirt.VIR_MIGRATE_AUTO_CONVERGE, libvirt.VIR_MIGRATE_UNDEFINE_SOURCE,
                 libvirt.VIR_MIGRATE_PERSIST_DEST):
        assert migration.LIVE_FLAGS & flag
    assert not migration.LIVE_FLAGS & libvirt.VIR_MIGRATE_TUNNELLED


def test_progress_reads_libvirt_s_job_statistics():
    stats = {"type": 2, "time_elapsed": 1500, "data_total": 400, "data_processed": 300,
             "data_remaining": 100, "memory_iteration": 2, "disk_total": 50,
             "disk_processed": 20}
    assert migration.progress_of(stats) == {
        "elapsed_ms": 1500, "data_total": 400, "data_processed": 300, "data_remaining": 100,
        "memory_iteration": 2, "disk_total": 50, "disk_processed": 20, "percent": 75.0}
    assert migration.progress_of({})["percent"] == 0.0


def test_the_bound_has_a_floor_and_grows_with_what_there_is_to_copy():
    limits = Limits(seconds_per_gib=60, min_seconds=30)
    assert limits.completion_timeout(0) == 30
    assert limits.completion_timeout(2 * GIB) == 120


def test_limits_come_from_the_driver_settings():
    settings = {"max_downtime_ms": 300, "completion_seconds_per_gib": 10,
                "completion_min_seconds": 5, "on_timeout": "abort",
                "bandwidth_mib_per_second": 32}
    assert Limits.from_settings(settings) == Limits(300, 10.0, 5.0, "abort", 32)


# -- the supervisor --------------------------------------------------------------------------


class FakeJob:
    """A domain whose migration job moves on by itself: `data_total` bytes to copy."""

    def __init__(self, data_total: int = GIB, running: bool = True):
        self.data_total, self.running = data_total, running
        self.calls: list[tuple[Any, ...]] = []

    def name(self) -> str:
        return UUID

    def jobStats(self) -> dict[str, Any]:  # noqa: N802 (libvirt's name)
        if not self.running:
            return {"type": libvirt.VIR_DOMAIN_JOB_NONE}
        return {"type": libvirt.VIR_DOMAIN_JOB_UNBOUNDED, "data_total": self.data_total,
                "data_remaining": self.data_total // 2, "time_elapsed": 100}

    def migrateSetMaxDowntime(self, ms: int, flags: int) -> None:  # noqa: N802
        self.calls.append(("downtime", ms))

    def suspend(self) -> None:
        self.calls.append(("suspend",))

    def abortJob(self) -> None:  # noqa: N802
        self.calls.append(("abort",))


class HeldJob(FakeJob):
    """As libvirt holds a call (a job lock, qemu's monitor, a client that lost a wake-up):
    the calls named in `held` do not return until `release` is set."""

    def __init__(self, *held: str, **kwargs: Any):
        super().__init__(**kwargs)
        self.held, self.release = set(held), threading.Event()
        self.entered: list[str] = []

    def _hold(self, what: str) -> None:
        self.entered.append(what)
        if what in self.held:
            self.release.wait(30)

    def jobStats(self) -> dict[str, Any]:  # noqa: N802
        self._hold("jobStats")
        return super().jobStats()

    def migrateSetMaxDowntime(self, ms: int, flags: int) -> None:  # noqa: N802
        self._hold("downtime")
        super().migrateSetMaxDowntime(ms, flags)

    def suspend(self) -> None:
        self._hold("suspend")
        super().suspend()

    def abortJob(self) -> None:  # noqa: N802
        self._hold("abort")
        super().abortJob()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def supervisor(job: FakeJob, clock: Clock, **kwargs: Any) -> Supervisor:
    watch = Supervisor(job, kwargs.pop("limits", Limits(max_downtime_ms=250,
                                                         seconds_per_gib=10, min_seconds=5)),
                       clock=clock, **kwargs)
    watch.started = 0.0
    return watch


def step_within(watch: Supervisor, seconds: float = 5.0) -> None:
    """One look, which must come back whatever libvirt does."""
    looked = threading.Thread(target=watch.step, daemon=True)
    looked.start()
    looked.join(seconds)
    assert not looked.is_alive(), "the supervisor's look is held by a libvirt call"


def look_until(watch: Supervisor, done: Callable[[], bool], what: str) -> None:
    """Looks at the same moment until `done` (an action's thread may answer after the
    look that asked; the next look reads it, never asking twice)."""
    support.wait_for(lambda: (step_within(watch), done())[1], 5, interval=0.01, what=what)


def test_progress_is_reported_once_the_job_runs():
    job, clock, seen = FakeJob(running=False), Clock(), []
    watch = supervisor(job, clock, progress=seen.append)
    watch.step()
    assert job.calls == [] and seen == []
    job.running = True
    watch.step()
    assert seen[-1]["percent"] == 50.0 and watch.last == seen[-1]
    assert job.calls == []  # the downtime allowed is the driver's, before the move


def test_a_migration_past_its_bound_is_paused_to_finish_then_cancelled_at_twice_it():
    job, clock = FakeJob(data_total=GIB), Clock()
    watch = supervisor(job, clock)  # bound: max(5, 10 s/GiB * 1 GiB) = 10 s
    clock.now = 9.9
    watch.step()
    assert job.calls == [] and watch.paused_at is None
    clock.now = 10.5
    watch.step()
    watch.step()  # paused once
    assert job.calls == [("suspend",)] and watch.paused_at == 10.5
    clock.now = 20.5
    watch.step()
    watch.step()  # cancelled once: libvirt took it
    assert job.calls == [("suspend",), ("abort",)]
    assert watch.aborted.startswith("not complete after 20s")


def test_with_abort_as_the_action_a_migration_past_its_bound_is_cancelled():
    job, clock = FakeJob(data_total=GIB), Clock()
    watch = supervisor(job, clock, limits=Limits(seconds_per_gib=10, min_seconds=5,
                                                 on_timeout="abort"))
    clock.now = 11
    watch.step()
    assert job.calls == [("abort",)] and watch.paused_at is None
    assert watch.aborted == "not complete within the 10s bound"


def test_a_cancel_asked_for_cancels_the_job():
    job, clock, asked = FakeJob(), Clock(), []
    watch = supervisor(job, clock, cancelled=lambda: bool(asked))
    watch.step()
    asked.append(True)
    watch.step()
    watch.step()
    assert job.calls == [("abort",)] and watch.aborted == "cancelled"


def test_the_bound_holds_while_libvirt_holds_the_supervisor_s_calls():
    """The fault of the 1 MiB/s cut-short move: a call libvirt does not answer (there,
    migrateSetMaxDowntime; here every look at the job) neither stops the looks nor keeps
    the bound from pausing at it and cancelling at twice it, sized by the data known before
    the move; a look never asks twice at once."""
    job, clock = HeldJob("downtime", "jobStats", data_total=GIB), Clock()
    watch = supervisor(job, clock, data_total=2 * GIB, answer_seconds=0.05)  # bound 20 s
    try:
        step_within(watch)
        clock.now = 19.9
        step_within(watch)
        assert job.calls == [] and watch.paused_at is None
        clock.now = 20.5
        look_until(watch, lambda: watch.paused_at == 20.5, "the pause")
        assert job.calls == [("suspend",)]
        clock.now = 40.5
        look_until(watch, lambda: watch.abort_taken, "the abort")
        assert job.calls == [("suspend",), ("abort",)]
        assert watch.aborted.startswith("not complete after 40s (twice the 20s bound)")
        assert job.entered.count("jobStats") == 1 and "downtime" not in job.entered
    finally:
        job.release.set()


def test_a_cancel_is_not_held_by_a_look_libvirt_does_not_answer():
    job, clock, asked = HeldJob("jobStats"), Clock(), [True]
    watch = supervisor(job, clock, cancelled=lambda: bool(asked), answer_seconds=0.05)
    try:
        look_until(watch, lambda: watch.abort_taken, "the abort")
        assert job.calls == [("abort",)] and watch.aborted == "cancelled"
    finally:
        job.release.set()


def test_an_abort_libvirt_refuses_is_asked_again_at_the_next_look():
    class Busy(FakeJob):
        def abortJob(self) -> None:  # noqa: N802
            super().abortJob()
            if len(self.calls) == 1:
                raise libvirt.libvirtError("cannot acquire state change lock")

    job, clock, asked = Busy(), Clock(), [True]
    watch = supervisor(job, clock, cancelled=lambda: bool(asked))
    for _ in range(3):
        watch.step()
    assert job.calls == [("abort",), ("abort",)] and watch.abort_taken


def test_a_move_the_abort_does_not_end_meets_the_last_resort_once():
    job, clock, ended = HeldJob("jobStats", "abort"), Clock(), []
    watch = supervisor(job, clock, cancelled=lambda: True, answer_seconds=0.05,
                       last_resort=lambda: ended.append(True), last_resort_seconds=30)
    try:
        clock.now = 1
        step_within(watch)
        clock.now = 31
        step_within(watch)
        assert not ended and watch.aborted == "cancelled"
        clock.now = 31.5
        step_within(watch)
        step_within(watch)
        support.wait_for(lambda: ended, 5, what="the last resort")
        assert ended == [True] and watch.gave_up
        support.wait_for(lambda: "abort" in job.entered, 5, what="the abort asked")
        assert job.entered.count("abort") == 1  # still on its way: not asked twice
    finally:
        job.release.set()


def test_a_pause_that_lands_after_the_migration_returned_is_known():
    """So the driver resumes the guest it finds paused on a failed move."""
    job, clock = HeldJob("jobStats", "suspend"), Clock()
    watch = supervisor(job, clock, data_total=GIB, answer_seconds=0.05, settle_seconds=5)
    clock.now = 10.5
    step_within(watch)
    support.wait_for(lambda: "suspend" in job.entered, 5, what="the pause asked")
    assert watch.paused_at is None
    job.release.set()
    watch.settle()
    assert watch.paused_at == 10.5 and job.calls == [("suspend",)]


def test_the_supervisor_runs_in_a_thread_until_the_migration_returns():
    job = FakeJob(data_total=1)
    seen: list[dict[str, Any]] = []
    with Supervisor(job, Limits(), progress=seen.append, poll_seconds=0.01):
        support.wait_for(lambda: len(seen) >= 3, 5, what="reports")
    count = len(seen)
    time.sleep(0.05)
    assert len(seen) == count  # stopped with the block
    assert job.calls == []


def test_a_job_that_ended_between_two_looks_stops_nothing():
    class Gone(FakeJob):
        def jobStats(self) -> dict[str, Any]:  # noqa: N802
            raise libvirt.libvirtError("domain is not running")

    with Supervisor(Gone(), Limits(), poll_seconds=0.01):
        time.sleep(0.05)


@pytest.fixture
def libvirt_pki(tmp_path):
    from etcd_compute.pki import Pki

    pki = Pki(tmp_path / "ca")
    pki.init()
    return pki


def serve_tls(pki_dir: Path):
    """A TLS server presenting pki_dir's server certificate (as a libvirtd would) on a free
    loopback port, for one handshake; (port, thread)."""
    import socket
    import ssl
    import threading

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki_dir / "servercert.pem", pki_dir / "serverkey.pem")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def once() -> None:
        with listener:
            connection, _ = listener.accept()
            try:
                with context.wrap_socket(connection, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass

    thread = threading.Thread(target=once, daemon=True)
    thread.start()
    return port, thread


def test_a_peer_whose_certificate_names_another_host_is_refused(libvirt_pki, tmp_path):
    """The attack: host hv1 says its libvirtd is at hv2's address. hv2's certificate is
    good for that address (libvirt's own check passes) but names hv2: refused."""
    ours = libvirt_pki.issue_libvirt("controller", tmp_path / "ctl", client_only=True)
    hv2 = libvirt_pki.issue_libvirt("hv2", tmp_path / "hv2", ips=["127.0.0.1"])
    port, thread = serve_tls(hv2)
    with pytest.raises(ValueError, match="presents a certificate for hv2, not for hv1"):
        migration.verify_peer("127.0.0.1", ours, "hv1", timeout=10, port=port)
    thread.join(10)
    port, thread = serve_tls(hv2)
    migration.verify_peer("127.0.0.1", ours, "hv2", timeout=10, port=port)
    thread.join(10)


def test_a_peer_of_another_ca_or_that_does_not_answer_is_refused(libvirt_pki, tmp_path):
    from etcd_compute.pki import Pki

    ours = libvirt_pki.issue_libvirt("controller", tmp_path / "ctl", client_only=True)
    stranger = Pki(tmp_path / "other")
    stranger.init(cluster="another")
    foreign = stranger.issue_libvirt("hv1", tmp_path / "foreign", ips=["127.0.0.1"])
    port, thread = serve_tls(foreign)
    with pytest.raises(ValueError, match="certificate refused"):
        migration.verify_peer("127.0.0.1", ours, "hv1", timeout=10, port=port)
    thread.join(10)
    with pytest.raises(OSError):
        migration.verify_peer("127.0.0.1", ours, "hv1", timeout=5, port=port)
    with pytest.raises(ValueError, match="our libvirt certificates"):
        migration.verify_peer("127.0.0.1", tmp_path / "none", "hv1", port=port)
