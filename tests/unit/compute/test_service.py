"""compute/service.py: the daemon's main process against in-memory etcd, Placement and pool:
what it watches, which watch events reach the machine, how an event that failed is retried,
the reconcile at start (pending specs, orphans, guests to power on, odd keys), the watch
resubscribing from the next revision, and shutdown. What an event does to an instance:
test_machine.py; the daemon as a process: tests/compute."""

from __future__ import annotations

import queue
import threading
import uuid as uuidlib
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyetcd.exceptions
import pytest

from etcd_compute import messages
from etcd_compute.compute import service as service_module
from etcd_compute.compute import worker
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.pool import BUILD, CHECK
from etcd_compute.compute.service import ComputeService
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.errors import EtcdUnavailable, PlacementUnavailable
from etcd_compute.instances import records, scheduling, states
from etcd_compute.network_backend import LIBVIRT, NEUTRON, trait_of
from tests.support import make_spec, wait_for
from tests.unit.fake_clock import FakeClock
from tests.unit.fakes import FakePlacement, FakePool, WatchedStore, delete_event, put_event

INVENTORY = {"VCPU": {"total": 8}, "MEMORY_MB": {"total": 4096}, "DISK_GB": {"total": 100}}


class Daemon:
    """A ComputeService over the fakes, for `hosts` simulated hosts, and steps of its loop."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hosts: int = 1,
                 **config: Any):
        self.hosts = [HostIdentity(str(uuidlib.uuid4()), f"host-{i}") for i in range(hosts)]
        self.rp = self.hosts[0].uuid
        self.config = deep_merge(deep_merge(COMPUTE_DEFAULTS, {
            "etcd": {"prefix": "/t"},
            "compute": {"uuid": self.rp, "name": "host-0", "state_dir": str(tmp_path),
                        "instances_dir": str(tmp_path / "instances"),
                        "shutdown_timeout_seconds": 0.5},
            "driver": {"name": "fake"},
        }), config)
        monkeypatch.setattr(worker, "_driver", None)
        worker.init_worker(self.config)  # the fake pool runs jobs here, on the fake driver
        self.store, self.placement, self.pool = WatchedStore("/t"), FakePlacement(), FakePool()
        monkeypatch.setattr(service_module, "Store", lambda _settings: self.store)
        monkeypatch.setattr(service_module, "PlacementClient", lambda _settings: self.placement)
        monkeypatch.setattr(service_module, "WorkerPool", lambda _config: self.pool)
        # Claims are checked as pool jobs here, run when the test runs the pool.
        monkeypatch.setattr(service_module, "ThreadRunner", lambda: self.pool)
        for host in self.hosts:
            self.placement.ensure_provider(host.uuid, host.name)
            self.placement.set_inventory(host.uuid, INVENTORY)
        # Time moves when a test says so (the main loop, the heartbeat, retries, shutdown).
        self.clock = FakeClock()
        self.service = ComputeService(self.config, self.hosts, clock=self.clock)
        self.keys = self.store.keys

    def schedule(self, rp: str | None = None) -> dict[str, Any]:
        """What the scheduler does: claim, then spec and SCHEDULED record."""
        spec = make_spec(rp or self.rp)
        self.placement.claim(spec["uuid"], spec["allocations"], "p", "u")
        scheduling.schedule(self.store, [(spec, "host-0")])
        return spec

    def settle(self) -> None:
        """Run the main loop's events and the pool's jobs until nothing is left."""
        for _ in range(1000):
            try:
                handler, args = self.service.events.get_nowait()
            except queue.Empty:
                if not self.pool.run_next():
                    return
                continue
            self.service.dispatch(handler, args)
        raise AssertionError("the loop did not settle")

    def run_until(self, condition: Callable[[], bool]) -> None:
        """Run the loop's events and pool jobs, one at a time, until `condition` holds."""
        for _ in range(1000):
            if condition():
                return
            try:
                handler, args = self.service.events.get_nowait()
            except queue.Empty:
                assert self.pool.run_next(), "nothing left to run"
                continue
            self.service.dispatch(handler, args)
        raise AssertionError("the condition never held")

    def state(self, uuid: str, rp: str | None = None) -> str | None:
        return records.read_record(self.store, rp or self.rp, uuid).state


@pytest.fixture
def daemon(tmp_path, monkeypatch) -> Daemon:
    return Daemon(tmp_path, monkeypatch)


def test_one_host_watches_its_own_specs_simulated_hosts_all_of_them(tmp_path, monkeypatch):
    one = Daemon(tmp_path / "one", monkeypatch)
    assert one.service.watch_prefix == one.keys.specs(one.rp)
    many = Daemon(tmp_path / "many", monkeypatch, hosts=3)
    assert many.service.watch_prefix == many.keys.hosts()


# -- watch events ---------------------------------------------------------------------------


def test_a_spec_of_ours_starts_its_build(daemon):
    spec = daemon.schedule()
    entry = daemon.store.get(daemon.keys.spec(daemon.rp, spec["uuid"]))
    daemon.service.on_watch_event(put_event(entry.key, entry.value, entry.mod_revision))
    # BUILDING at once; the claim check and the image fetch run before the build.
    assert daemon.state(spec["uuid"]) == states.BUILDING and len(daemon.pool.pending) == 2
    assert daemon.service.machine.jobs[spec["uuid"]].kind == CHECK
    daemon.settle()
    assert daemon.state(spec["uuid"]) == states.ACTIVE


def test_other_events_under_the_prefix_change_nothing(tmp_path, monkeypatch):
    daemon = Daemon(tmp_path, monkeypatch, hosts=2)
    spec = daemon.schedule()
    entry = daemon.store.get(daemon.keys.spec(daemon.rp, spec["uuid"]))
    theirs = make_spec(str(uuidlib.uuid4()))  # for a host this process does not run
    theirs_value = messages.encode(messages.INSTANCE_SPEC, theirs)
    writes, claims = len(daemon.store.committed), dict(daemon.placement.consumers)
    for event in (put_event(daemon.keys.spec(theirs["host"], theirs["uuid"]), theirs_value, 9),
                  delete_event(entry.key, 9),  # we delete our spec keys ourselves
                  put_event(daemon.keys.record(daemon.rp, spec["uuid"]), b"{}", 9),
                  put_event(daemon.keys.alive(daemon.rp), b"", 9)):
        daemon.service.on_watch_event(event)
    assert len(daemon.store.committed) == writes and not daemon.pool.pending
    assert daemon.placement.consumers == claims


def test_a_spec_without_allocations_is_judged_and_the_next_reconcile_meets_it_too(daemon):
    """The schema leaves `allocations` optional: the capacity account read it before the spec
    was judged (KeyError: neither refused nor built) and every start's reconcile died on it."""
    unclaimed, claimed = make_spec(daemon.rp), make_spec(daemon.rp)
    daemon.placement.claim(claimed["uuid"], claimed["allocations"], "p", "u")
    for spec in (unclaimed, claimed):
        del spec["allocations"]
        daemon.store.put(messages.INSTANCE_SPEC, daemon.keys.spec(daemon.rp, spec["uuid"]),
                         spec)
        entry = daemon.store.get(daemon.keys.spec(daemon.rp, spec["uuid"]))
        daemon.service.on_watch_event(put_event(entry.key, entry.value, entry.mod_revision))
    daemon.settle()
    refused = records.read_record(daemon.store, daemon.rp, unclaimed["uuid"]).record
    assert refused["state"] == states.ERROR
    assert refused["error"] == "refused: Placement holds no claim for this instance"
    assert daemon.state(claimed["uuid"]) == states.ACTIVE  # its claim holds: built
    daemon.service.reconcile()  # as the next start does
    daemon.settle()
    # The refused one's spec is gone; the built one holds what its claim was judged on.
    assert daemon.service.capacity.held == {daemon.rp: {claimed["uuid"]: claimed["resources"]}}


def test_an_event_that_met_an_unreachable_service_is_tried_again_a_second_later(daemon):
    def unreachable(*_args: Any) -> None:
        raise PlacementUnavailable("Placement at http://p is unreachable")

    daemon.service.dispatch(unreachable, ("a",))
    daemon.clock.advance(0.99)
    assert daemon.service.events.empty()
    daemon.clock.advance(0.01)
    assert daemon.service.events.get_nowait() == (unreachable, ("a",))


def test_an_unexpected_error_is_logged_and_the_loop_goes_on(daemon, caplog):
    def broken() -> None:
        raise KeyError("a bug")

    daemon.service.dispatch(broken, ())
    assert "unexpected error handling broken" in caplog.text
    daemon.clock.advance(60)
    assert daemon.service.events.empty()  # not retried


def test_stop_wakes_the_main_loop_at_once(daemon):
    handled = threading.Event()
    loop = threading.Thread(target=daemon.service.main_loop)
    loop.start()
    daemon.service.post(handled.set)
    assert handled.wait(5)
    daemon.service.stop()
    loop.join(0.5)  # not the loop's one-second poll
    assert not loop.is_alive()


# -- the watch ------------------------------------------------------------------------------


def run_watch(daemon: Daemon) -> threading.Thread:
    """The daemon's watch, with backoffs that do not wait (a resubscription is at once)."""
    watch = daemon.service.watch = daemon.service.make_watch()
    watch.sleep = lambda _seconds: watch.cancelled
    return watch.start()


def stop_watch(daemon: Daemon, thread: threading.Thread) -> None:
    assert daemon.service.watch is not None
    daemon.service.watch.cancel()
    daemon.store.cancel_watches()  # the subscription it may be waiting on
    thread.join(5)
    assert not thread.is_alive()


def test_the_watch_resubscribes_after_the_last_event_it_saw(daemon):
    prefix = daemon.service.watch_prefix
    daemon.service.next_revision = 7
    daemon.store.script_watch(prefix, [put_event(prefix + "a", b"", 7),
                                       put_event(prefix + "b", b"", 9)],
                              fault=pyetcd.exceptions.ConnectionFailedError())
    daemon.store.script_watch(prefix, [put_event(prefix + "c", b"", 12)], fault=RuntimeError("?"))
    thread = run_watch(daemon)
    queued = [daemon.service.events.get(timeout=5) for _ in range(3)]
    wait_for(lambda: len(daemon.store.watched_from) == 3, 5, what="a third subscription")
    stop_watch(daemon, thread)
    assert [args[0].key for _handler, args in queued] == [
        f"{prefix}{name}".encode() for name in "abc"]
    assert all(handler == daemon.service.on_watch_event for handler, _args in queued)
    assert [start for _prefix, start in daemon.store.watched_from[:3]] == [7, 10, 13]
    assert daemon.service.watch.next_revision == 13


def test_history_etcd_compacted_is_made_up_by_a_reconcile_before_watching_again(daemon):
    spec = daemon.schedule()  # written while the watch could not deliver it
    daemon.service.next_revision = 3
    daemon.store.script_watch(daemon.service.watch_prefix,
                              fault=pyetcd.exceptions.RevisionCompactedError(5))
    thread = run_watch(daemon)
    handler, args = daemon.service.events.get(timeout=5)
    assert daemon.store.watched_from[-1][1] == 3  # not resubscribed yet: it waits
    revision = daemon.store.revision
    daemon.service.dispatch(handler, args)  # the main loop reconciles
    wait_for(lambda: len(daemon.store.watched_from) == 2, 5, what="a second subscription")
    stop_watch(daemon, thread)
    assert daemon.state(spec["uuid"]) == states.BUILDING
    assert daemon.store.watched_from[1][1] == revision + 1  # after what the reconcile read


# -- the start ------------------------------------------------------------------------------

# Each step of the start after registration: (the service's attribute that owns it, its name).
START_STEPS = {
    "the worker pool": ("pool", "start"),
    "the libvirt and console relay addresses": (None, "publish_addresses"),
    "the heartbeat": ("heartbeat", "start"),
    "the metadata server": (None, "ensure_mdserver"),
    "the reconcile": (None, "reconcile"),
    "the watch and timers": (None, "start_threads"),
    "the power watch": ("power", "start"),
}


def run_in_thread(daemon: Daemon) -> tuple[threading.Thread, list[int]]:
    """`run` as compute.py calls it, in a thread; what it returned, once it did."""
    returned: list[int] = []
    runner = threading.Thread(target=lambda: returned.append(
        daemon.service.run(install_signal_handlers=False)), daemon=True)
    runner.start()
    return runner, returned


@pytest.mark.parametrize("step", START_STEPS)
def test_etcd_lost_at_any_step_of_the_start_is_waited_out_as_when_running(
        daemon, monkeypatch, caplog, step):
    """Registered, the daemon goes on starting even if etcd goes away: the step that needs it
    is tried again a second later, as any event of the running daemon is. Once the first
    such error left `run` (compute.py exited 3): without a supervisor the host stayed
    down."""
    spec = daemon.schedule()
    owner_name, name = START_STEPS[step]
    owner = getattr(daemon.service, owner_name) if owner_name else daemon.service
    real = getattr(owner, name)

    def etcd_lost_here(*args: Any) -> Any:
        daemon.store.reachable = False
        monkeypatch.setattr(owner, name, real)  # once
        return real(*args)

    monkeypatch.setattr(owner, name, etcd_lost_here)
    caplog.set_level("INFO", logger="etcd_compute.compute")
    runner, returned = run_in_thread(daemon)
    wait_for(lambda: not runner.is_alive() or "retrying in 1 s" in caplog.text
             or "compute ready" in caplog.text, 10, what=f"etcd lost at {step}")
    daemon.clock.advance(3.0)  # three tries of the step, each a second after the last
    assert runner.is_alive(), f"run returned {returned} with etcd lost at {step}"
    daemon.store.reachable = True
    daemon.clock.advance(1.0)
    wait_for(lambda: "compute ready" in caplog.text, 10, what="the start to end")

    def built() -> bool:
        daemon.pool.run_next()
        return daemon.state(spec["uuid"]) == states.ACTIVE

    wait_for(built, 10, what="the spec written before the start to be built")
    daemon.service.stop()
    runner.join(10)
    assert returned == [0]


def test_etcd_unreachable_at_the_first_contact_ends_the_start(daemon):
    """Registration is the daemon's first contact with Placement and etcd: unreachable then,
    `run` ends with the error (compute.py: exit 3, one line), so that a wrong endpoint or
    certificate shows at once; a supervisor starts it again."""
    daemon.store.reachable = False
    with pytest.raises(EtcdUnavailable, match="unreachable"):
        daemon.service.run(install_signal_handlers=False)


def test_a_start_step_that_fails_otherwise_shuts_the_daemon_down_and_says_why(daemon,
                                                                          monkeypatch):
    def broken() -> None:
        raise OSError("no forkserver")

    monkeypatch.setattr(daemon.service.pool, "start", broken)
    with pytest.raises(OSError, match="no forkserver"):
        daemon.service.run(install_signal_handlers=False)
    # Shut down first: the hosts unschedulable, the connection closed.
    assert "COMPUTE_STATUS_DISABLED" in daemon.placement.get_traits(daemon.rp)
    assert daemon.store.closed


# -- the fence --------------------------------------------------------------------------------


def test_a_heartbeat_that_cannot_renew_fences_the_host_and_a_renewal_lifts_it(daemon):
    """The daemon wires its heartbeat to its fencer: once no renewal succeeded for
    heartbeat_ttl - fence_margin_seconds, no job starts and every guest here is off; the
    next renewal lifts the fence through the main loop, whose reconcile powers our ACTIVE
    guests on again and builds what came meanwhile."""
    kept = daemon.schedule()
    daemon.service.reconcile()
    daemon.settle()
    assert worker.running() == {kept["uuid"]}
    etcd_answers = threading.Event()
    keep_alive = daemon.store.keep_alive

    def renew(lease: int, timeout: float) -> int:
        if etcd_answers.is_set():
            return keep_alive(lease, timeout)
        raise EtcdUnavailable("etcd at 127.0.0.1:2379 is unreachable")

    daemon.store.keep_alive = renew  # type: ignore[method-assign]
    heartbeat = daemon.service.heartbeat
    heartbeat.start()
    daemon.clock.waiters(2)
    fenced_after = daemon.clock.advance_until(lambda: daemon.service.gate.closed,
                                              within=heartbeat.ttl)
    assert heartbeat.fence_after <= fenced_after < heartbeat.ttl
    assert daemon.pool.stopped and worker.running() == set()
    late = daemon.schedule()  # comes while fenced: nothing starts
    daemon.service.reconcile()
    daemon.settle()  # (the capacity account it posts is published; still nothing starts)
    assert daemon.pool.pending == [] and daemon.state(late["uuid"]) == states.SCHEDULED

    etcd_answers.set()
    daemon.clock.advance_until(lambda: not daemon.service.events.empty(),
                               within=heartbeat.timing.interval)
    daemon.settle()  # the main loop lifts the fence and reconciles
    assert not daemon.service.gate.closed and not daemon.pool.stopped
    assert worker.running() == {kept["uuid"], late["uuid"]}
    assert daemon.state(late["uuid"]) == states.ACTIVE
    daemon.service.stopping.set()


# -- the reconcile --------------------------------------------------------------------------


def test_the_reconcile_finishes_pending_specs_and_watches_from_after_them(daemon):
    specs = [daemon.schedule() for _ in range(2)]
    revision = daemon.store.revision
    daemon.service.reconcile()
    assert daemon.service.next_revision == revision + 1
    daemon.settle()
    assert [daemon.state(spec["uuid"]) for spec in specs] == [states.ACTIVE] * 2


def test_a_guest_no_spec_asks_for_is_destroyed_and_an_active_stopped_one_powered_on(daemon):
    kept = daemon.schedule()
    daemon.service.reconcile()
    daemon.settle()
    orphan = make_spec(daemon.rp)
    worker.build(orphan)  # moved or deleted while this host was away
    worker.driver().power_off(kept["uuid"])  # a fence, or the host rebooted
    claims = dict(daemon.placement.consumers)
    daemon.service.reconcile()
    assert worker.list_instances() == {kept["uuid"]}
    assert worker.running() == {kept["uuid"]}
    assert daemon.placement.consumers == claims  # claims are not the orphan's business


def test_guests_whose_jobs_are_in_flight_are_left_to_their_jobs(daemon):
    kept = daemon.schedule()
    daemon.service.reconcile()
    daemon.settle()
    orphan = make_spec(daemon.rp)
    worker.build(orphan)
    worker.driver().power_off(kept["uuid"])
    for uuid in (kept["uuid"], orphan["uuid"]):  # an evacuation, a build: their jobs decide
        daemon.service.machine.jobs[uuid] = SimpleNamespace(kind="destroy", uuid=uuid)
    daemon.service.reconcile()
    assert worker.list_instances() == {kept["uuid"], orphan["uuid"]}
    assert worker.running() == {orphan["uuid"]}


def test_a_broken_driver_does_not_stop_the_reconcile(daemon, monkeypatch, caplog):
    spec = daemon.schedule()

    def broken() -> set[str]:
        raise OSError("the hypervisor is gone")

    monkeypatch.setattr(worker, "list_instances", broken)
    daemon.service.reconcile()
    assert "could not list or fix driver instances: the hypervisor is gone" in caplog.text
    assert daemon.state(spec["uuid"]) == states.BUILDING  # the specs were still handled


def test_keys_that_are_no_instance_key_of_ours_are_removed(daemon):
    uuid = str(uuidlib.uuid4())
    host = daemon.keys.host(daemon.rp)
    odd = [f"{host}junk", f"{host}specs/not-a-uuid", f"{host}specs/{uuid}/extra",
           f"{host}unknown/{uuid}", f"{host}specs//{uuid}", f"{host}specs/"]
    ours = [daemon.keys.record(daemon.rp, uuid), daemon.keys.console(daemon.rp, uuid)]
    theirs = [daemon.keys.hosts() + f"{uuidlib.uuid4()}/junk"]
    for key in odd + ours + theirs:
        daemon.store.put_raw(key, "{}")
    daemon.service.remove_odd_keys()
    assert sorted(daemon.store.entries) == sorted(ours + theirs)


def test_simulated_hosts_leave_keys_of_hosts_they_do_not_run(tmp_path, monkeypatch):
    daemon = Daemon(tmp_path, monkeypatch, hosts=2)
    stranger = daemon.keys.hosts() + f"{uuidlib.uuid4()}/junk"
    mine = daemon.keys.host(daemon.hosts[1].uuid) + "junk"
    for key in (stranger, mine):
        daemon.store.put_raw(key, "{}")
    daemon.service.remove_odd_keys()
    assert list(daemon.store.entries) == [stranger]


# -- shutdown -------------------------------------------------------------------------------


def test_shutdown_lets_jobs_finish_then_leaves_the_hosts_unschedulable(tmp_path, monkeypatch):
    daemon = Daemon(tmp_path, monkeypatch, hosts=2)
    spec = daemon.schedule()
    daemon.service.reconcile()
    daemon.run_until(lambda: daemon.service.machine.jobs[spec["uuid"]].kind == BUILD)
    stopping = threading.Thread(target=daemon.service.shutdown)
    stopping.start()
    daemon.clock.waiters(1)  # for the job
    daemon.pool.run_next()  # the build ends during shutdown, with no time gone by
    stopping.join(5)
    assert not stopping.is_alive() and daemon.clock.now() == 1000.0
    assert daemon.state(spec["uuid"]) == states.ACTIVE
    for host in daemon.hosts:
        assert "COMPUTE_STATUS_DISABLED" in daemon.placement.get_traits(host.uuid)
    assert daemon.pool.stopped and daemon.store.closed


def test_a_claim_checked_during_shutdown_starts_no_build(daemon):
    spec = daemon.schedule()
    daemon.service.reconcile()
    finish = threading.Timer(0.1, lambda: (daemon.pool.run_next(), daemon.pool.run_next()))
    finish.start()  # the claim check and the image fetch end during shutdown
    daemon.service.stop()
    daemon.service.shutdown()
    finish.join()
    assert daemon.state(spec["uuid"]) == states.BUILDING  # the next start resumes it
    assert daemon.pool.pending == [] and worker.list_instances() == set()


def test_shutdown_does_not_wait_for_a_job_past_its_timeout(daemon, caplog):
    daemon.schedule()
    daemon.service.reconcile()  # the build never finishes
    stopping = threading.Thread(target=daemon.service.shutdown)
    stopping.start()
    daemon.clock.waiters(1)
    daemon.clock.advance(daemon.config["compute"]["shutdown_timeout_seconds"] - 0.01)
    assert stopping.is_alive() and not daemon.pool.stopped
    daemon.clock.advance(0.01)
    stopping.join(5)
    assert not stopping.is_alive()
    assert "1 job(s) still running at shutdown; the next start resumes them" in caplog.text
    assert daemon.pool.stopped and daemon.store.closed


def test_a_libvirt_host_publishes_where_its_peers_reach_its_libvirtd(daemon):
    from etcd_compute import hosts

    daemon.service.publish_addresses()  # the fake driver: nowhere
    assert hosts.libvirt_address(daemon.store, daemon.rp) is None
    daemon.config["driver"]["name"] = "libvirt"
    daemon.config["driver"]["libvirt"]["migration"]["address"] = "10.0.0.7"
    daemon.service.publish_addresses()
    assert hosts.libvirt_address(daemon.store, daemon.rp) == "10.0.0.7"
    daemon.config["driver"]["libvirt"]["migration"]["address"] = None
    daemon.service.publish_addresses()  # no longer: said so
    assert hosts.libvirt_address(daemon.store, daemon.rp) is None


@pytest.mark.parametrize("backend", [LIBVIRT, NEUTRON])
def test_a_host_advertises_its_network_backends_trait_and_publishes_it(tmp_path, monkeypatch,
                                                                      backend):
    daemon = Daemon(tmp_path, monkeypatch, network={"backend": backend})
    daemon.service.registration.register()
    other = NEUTRON if backend == LIBVIRT else LIBVIRT
    traits = daemon.placement.get_traits(daemon.rp)
    assert trait_of(backend) in traits and trait_of(other) not in traits
    # in its account too: a scheduler planning on the accounts sees it (hostview.py)
    assert trait_of(backend) in daemon.service.capacity.traits()


def test_neutrons_events_for_a_waiting_build_reach_it_and_nothing_else(tmp_path, monkeypatch):
    from etcd_compute.instances import external_events

    port = "11111111-1111-4111-8111-111111111111"
    # The guest built by the fake driver, as on Neutron ports (no Neutron here).
    monkeypatch.setattr(worker, "build", lambda spec: {**worker.driver().build(spec),
                                                       "ports": [port]})
    daemon = Daemon(tmp_path, monkeypatch, network={"backend": NEUTRON})
    assert daemon.service.machine.plugging.timeout == 300  # network.neutron's default
    spec = daemon.schedule()
    daemon.service.machine.on_spec(daemon.rp, spec["uuid"], daemon.store.get(
        daemon.keys.spec(daemon.rp, spec["uuid"])).value, 0)
    daemon.settle()
    assert daemon.state(spec["uuid"]) == states.BUILDING  # waiting for its port
    assert external_events.hand_to_host(daemon.store, daemon.rp, spec["uuid"], [
        {"name": "network-vif-plugged", "status": "completed", "tag": port, "at": 1.0}],
        daemon.store.grant(60))
    entry = daemon.store.get(daemon.keys.external_events(daemon.rp, spec["uuid"]))
    daemon.service.on_watch_event(put_event(entry.key, entry.value, entry.mod_revision))
    daemon.settle()
    assert daemon.state(spec["uuid"]) == states.ACTIVE
    # Not a spec: the capacity account is not said to be as of it.
    assert daemon.service.capacity.as_of < entry.mod_revision


def test_a_build_waiting_for_its_ports_does_not_hold_the_shutdown(tmp_path, monkeypatch):
    monkeypatch.setattr(worker, "build", lambda spec: {
        **worker.driver().build(spec), "ports": ["11111111-1111-4111-8111-111111111111"]})
    daemon = Daemon(tmp_path, monkeypatch, network={"backend": NEUTRON})
    spec = daemon.schedule()
    daemon.service.reconcile()
    daemon.settle()
    assert daemon.state(spec["uuid"]) == states.BUILDING and daemon.service.machine.jobs
    stopping = threading.Thread(target=daemon.service.shutdown)
    stopping.start()
    stopping.join(5)  # no time passes: nothing waits for Neutron's event
    held = stopping.is_alive()
    daemon.clock.advance(daemon.config["compute"]["shutdown_timeout_seconds"])  # (frees it)
    stopping.join(5)
    assert not held and daemon.pool.stopped


def test_ports_not_released_of_an_instance_gone_are_released_at_the_reconcile(
        daemon, monkeypatch):
    """A failed build whose cleanup met a Neutron outage left its ports' ledger: the next
    reconcile releases them (worker.destroy) when no spec asks for the instance; one a
    spec asks for keeps its ports."""
    kept = daemon.schedule()
    daemon.service.reconcile()
    daemon.settle()
    gone = make_spec(daemon.rp)["uuid"]
    released: list[str] = []
    destroy = worker.destroy
    monkeypatch.setattr(worker, "port_ledgers", lambda: {gone, kept["uuid"]})
    monkeypatch.setattr(worker, "destroy", lambda uuid: (released.append(uuid),
                                                         destroy(uuid))[-1])
    daemon.service.reconcile()
    assert released == [gone]
    assert worker.list_instances() == {kept["uuid"]}
