"""The compute daemon's main process: lifecycle, event loop, watch, timers, reconcile.

One thread (the caller of `run`) owns all decisions and every etcd write;
other threads only put events on `self.events`:

- the watch thread (`watching.PrefixWatch`): etcd events under our /hosts/
  prefix, resubscribed from the last seen revision + 1 after any error; after
  a compaction it has the main loop reconcile and carries on from there;
- the timer thread: console refresh, inventory refresh, metadata server check;
- pool callbacks: a build, destroy or action job finished, failed, timed out or its worker died;
- the power watch (libvirt's lifecycle events): a guest started or stopped
  (`power.py` decides whether that was our own doing).

What an event does to an instance is `machine.py`'s business; the heartbeat lease is
`heartbeat.py`'s; Placement registration is `registration.py`'s; passwords `passwords.py`'s.

The start: registration in Placement first (unreachable then, `run` ends: exit 3);
every step after it (`start_steps`: pool, heartbeat, reconcile, watch...) is an event
of the main loop, so an etcd or Placement outage during the start is waited out as
one while running is, the step tried again each second.

Exactly once: a build starts only through a transaction that moves the
instance record to BUILDING at the revision we read, and drivers are
idempotent per instance uuid, so re-delivered events and restarts never
build twice. Reconciliation at every start (and after etcd compacted the
history we needed) lists our prefix and finishes whatever is pending.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any

import pyetcd.events

from etcd_compute import network_backend
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.compute import console_relay, passwords, worker
from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.compute.capacity import CapacityAccount
from etcd_compute.compute.checks import ClaimChecks, ThreadRunner
from etcd_compute.compute.consoles import CONSOLE_REFRESH_SECONDS, Consoles
from etcd_compute.compute.fencing import Fencer, Gate
from etcd_compute.compute.heartbeat import Heartbeat
from etcd_compute.compute.identity import HostIdentity
from etcd_compute.compute.inventory import arch_trait, hypervisor_traits
from etcd_compute.compute.machine import InstanceMachine, instance_log
from etcd_compute.compute.pool import WorkerPool
from etcd_compute.compute.power import PowerSync
from etcd_compute.compute.registration import Registration
from etcd_compute.drivers import load_power_watch
from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.heartbeat_timing import heartbeat_timing
from etcd_compute.hosts import publish_console_address, publish_libvirt_address, under_maintenance
from etcd_compute.instances import ownership, records, states
from etcd_compute.keys import EXTERNAL_EVENTS, UUID
from etcd_compute.network_backend import backend_of, trait_of, uses_neutron
from etcd_compute.placement import PlacementClient
from etcd_compute.watching import PrefixWatch, on_owner_thread

LOG = logging.getLogger("etcd_compute.compute")

MDSERVER_CHECK_SECONDS = 30

Event = tuple[Callable[..., None], tuple[Any, ...]]


class ComputeService:
    def __init__(self, config: dict[str, Any], hosts: list[HostIdentity],
                 clock: Clock = SYSTEM):
        self.config = config
        self.clock = clock
        self.settings = config["compute"]
        self.hosts = {host.uuid: host for host in hosts}
        self.store = Store(config["etcd"])
        self.keys = self.store.keys
        self.placement = PlacementClient(config["placement"])
        self.events: queue.Queue[Event] = queue.Queue()
        self.stopping = threading.Event()
        # Why a step of the start failed, other than an outage (`run` raises it).
        self._start_failure: Exception | None = None
        # Next revision the watch must deliver (before it runs; then the watch's own).
        self._next_revision = 0
        self.watch: PrefixWatch | None = None
        # Neutron's events for our builds (plugging.py): their own watch, when one host's
        # specs are all the main watch follows.
        self.events_watch: PrefixWatch | None = None
        self.pool = WorkerPool(config)
        self.gate = Gate()
        self.fencer = Fencer(config, self.pool, self.gate)
        self.registration = Registration(
            self.placement, self.settings, self.hosts,
            lambda rp: under_maintenance(self.store, rp),
            {arch_trait(), trait_of(backend_of(config))} | hypervisor_traits(config["driver"]))
        self.heartbeat = Heartbeat(
            self.store, self.hosts, self.settings["heartbeat_ttl"], config["driver"]["name"],
            self.stopping, self.settings["fence_margin_seconds"], on_fence=self.fencer.fence,
            on_unfence=lambda: self.post(self.unfence),
            timing=heartbeat_timing(self.settings, config["etcd"]), clock=clock)
        self.consoles = Consoles(self.store, self.pool, self.post)
        self.console_relay: console_relay.ConsoleRelay | None = None
        # Builds' claims are checked in a thread of their own, beside the image fetch, with
        # a Placement session of their own.
        self.claim_checks = ClaimChecks(PlacementClient(config["placement"]), ThreadRunner())
        self.machine = InstanceMachine(self.store, self.placement, self.pool, self.consoles,
                                       self.hosts, self.settings, self.post, self.stopping,
                                       self.gate, claim_checks=self.claim_checks,
                                       vif_plugging=config["network"]["neutron"]
                                       if uses_neutron(config) else None)
        self.power = PowerSync(self.store, self.hosts, self.consoles, self.gate,
                               busy=lambda uuid: uuid in self.machine.jobs,
                               settled_at=lambda uuid: self.machine.settled.get(uuid, 0.0))
        self.machine.power_check = self.power.check
        self.passwords = passwords.Passwords.of(self)  # a guest's POST, published (one host)
        # Our capacity as we account for it, published in /stats/<rp> for schedulers that
        # plan without asking Placement for candidates; of our traits, those a filter
        # compares (ImagePropertiesFilter: architecture, hypervisor): a query naming any
        # other trait goes to Placement.
        self.capacity = CapacityAccount(
            self.store, list(self.hosts), lambda: self.registration.inventories,
            lambda: self.registration.traits & self.registration.platform_traits, self.post)
        # One watch covers all our hosts: the host's own specs, or all of /hosts/
        # when one process simulates many.
        self.watch_prefix = (
            self.keys.specs(next(iter(self.hosts))) if len(self.hosts) == 1 else self.keys.hosts()
        )

    def post(self, handler: Callable[..., None], args: tuple[Any, ...] = ()) -> None:
        """Queue `handler(*args)` for the main loop (any thread may call this)."""
        self.events.put((handler, args))

    # ------------------------------------------------------------------ life

    def run(self, install_signal_handlers: bool = True) -> int:
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
        compute_metrics.start(self.config, self.machine.jobs, self._metrics_refresher)
        # The first contact with Placement and etcd: unreachable here, the error leaves
        # `run` (exit 3, one line), so a wrong endpoint or certificate shows at once.
        self.registration.register()
        # From here on the start is events of the main loop, so an outage met by any step
        # is waited out where the running daemon waits out its own (`dispatch`).
        self.post(self.start, (0,))
        self.main_loop()
        self.shutdown()
        if self._start_failure is not None:
            raise self._start_failure
        return 0

    def start_steps(self) -> list[Callable[[], Any]]:
        """The start after registration, in order. The pool first: a fence (the heartbeat's)
        stops it, and only the fence's lift may start it again."""
        return [self.pool.start, self.publish_addresses, self.heartbeat.start,
                self.ensure_mdserver, self.reconcile, self.passwords.start, self.start_threads,
                lambda: self.power.start(load_power_watch(self.config), self.post),
                self._ready]

    def start(self, step: int) -> None:
        """Step `step` of the start, then the next one queued. etcd or Placement unreachable
        raises out to `dispatch`, which runs this same step again a second later; any other
        failure stops the daemon, and `run` raises it once shut down."""
        steps = self.start_steps()
        try:
            steps[step]()
        except ServiceUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 (raised again by `run`, after the shutdown)
            LOG.error("start failed: %s: %s", exc.__class__.__name__, exc)
            self._start_failure = exc
            self.stop()
            return
        if step + 1 < len(steps):
            self.post(self.start, (step + 1,))

    def _ready(self) -> None:
        LOG.info("compute ready: %d host(s), driver %s, watching %s from revision %d",
                 len(self.hosts), self.config["driver"]["name"], self.watch_prefix,
                 self.next_revision)

    def _metrics_refresher(self) -> compute_metrics.Refresher:
        """What keeps the instance counts and capacity metrics (when they are served)."""
        return compute_metrics.Refresher(
            self.store, self.hosts, lambda: self.registration.inventories,
            PlacementClient(self.config["placement"]),
            self.settings["inventory_refresh_seconds"], self.stopping)

    def start_threads(self) -> None:
        self.watch = self.make_watch()
        threading.Thread(target=self.watch.run, name="watch", daemon=True).start()
        if uses_neutron(self.config) and len(self.hosts) == 1:
            prefix = self.keys.external_events_prefix(next(iter(self.hosts)))
            self.events_watch = PrefixWatch(
                self.store, prefix, on_event=self._watch_event,
                resync=on_owner_thread(self.post, lambda: self.machine.plugging.resync(prefix),
                                       self.stopping.is_set), name="events-watch", log=LOG)
            threading.Thread(target=self.events_watch.run, name="events-watch",
                             daemon=True).start()
        threading.Thread(target=self._timer_loop, name="timer", daemon=True).start()

    @property
    def next_revision(self) -> int:
        """The next revision the watch delivers: everything before it was handled."""
        return self.watch.next_revision if self.watch is not None else self._next_revision

    @next_revision.setter
    def next_revision(self, revision: int) -> None:
        self._next_revision = revision
        if self.watch is not None:  # a reconcile read up to here: resume after it
            self.watch.next_revision = revision

    def _on_signal(self, signum: int, _frame: Any) -> None:
        LOG.info("received %s: finishing in-flight jobs, then stopping",
                 signal.Signals(signum).name)
        self.stop()

    def stop(self) -> None:
        self.stopping.set()
        for watch in (self.watch, self.events_watch):
            if watch is not None:
                watch.cancel()  # nothing more to hand over (the connection closes next)
        self.post(lambda: None)

    def main_loop(self) -> None:
        while not self.stopping.is_set():
            try:
                handler, args = self.clock.get(self.events, 1.0)
            except queue.Empty:
                continue
            self.dispatch(handler, args)

    def dispatch(self, handler: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            handler(*args)
        except ServiceUnavailable as exc:
            # etcd or Placement is down: retry the same event shortly.
            compute_metrics.retried("dispatch", exc)
            LOG.warning("%s; retrying in 1 s", exc)
            self.clock.later(1.0, self.events.put, (handler, args))
        except Exception:
            LOG.exception("unexpected error handling %s", getattr(handler, "__name__", handler))

    def shutdown(self) -> None:
        """Let in-flight jobs finish (bounded), make hosts unschedulable, drop the lease."""
        for watch in (self.watch, self.events_watch):
            if watch is not None:
                watch.cancel()
        deadline = self.clock.now() + self.settings["shutdown_timeout_seconds"]

        def running() -> list[str]:  # (a build waiting for its ports: no event comes now)
            return [uuid for uuid in self.machine.jobs if uuid not in self.machine.plugging.waits]

        while running() and self.clock.now() < deadline:
            try:
                handler, args = self.clock.get(self.events, deadline - self.clock.now())
            except queue.Empty:
                continue
            if handler == self.machine.on_job_done:
                self.dispatch(handler, args)
        if self.machine.jobs:
            LOG.warning("%d job(s) still running at shutdown; the next start resumes them",
                        len(self.machine.jobs))
        for host in self.hosts.values():
            try:
                self.registration.set_disabled(host.uuid, True)
            except EtcdComputeError as exc:
                LOG.warning("could not disable provider %s: %s", host.uuid, exc)
        self.power.stop()
        if self.console_relay is not None:
            self.console_relay.stop()
        self.claim_checks.stop()
        self.heartbeat.revoke()
        self.pool.stop()
        self.store.close()
        LOG.info("compute stopped")

    def publish_addresses(self) -> None:
        """Where this host's libvirtd takes its peers' TLS connections (for guests moving here,
        for a controller fencing it; none: fake driver or no migration.address), and where
        its console relay (started here) listens: none when off or no screens."""
        libvirt_address = None
        if self.config["driver"]["name"] == "libvirt":
            libvirt_address = self.config["driver"]["libvirt"]["migration"]["address"]
        if self.console_relay is None:
            self.console_relay = console_relay.start(self.config)
        relay_address = self.console_relay.listening if self.console_relay else None
        for rp in self.hosts:
            publish_libvirt_address(self.store, rp, libvirt_address)
            publish_console_address(self.store, rp, relay_address)

    def ensure_mdserver(self) -> None:
        """Start the metadata server for our guests if it is not running (libvirt only; it
        serves the libvirt network's guests, not Neutron's)."""
        if self.config["driver"]["name"] != "libvirt" or \
                network_backend.uses_neutron(self.config):
            return
        from etcd_compute.mdserver.supervisor import ensure_mdserver

        pid = ensure_mdserver(self.config)
        if pid:
            LOG.debug("metadata server running (pid %d)", pid)

    # ------------------------------------------------------------------ timer

    def _timer_loop(self) -> None:
        refresh_every = self.settings["inventory_refresh_seconds"]
        next_refresh = self.clock.now() + refresh_every
        next_mdserver_check = self.clock.now() + MDSERVER_CHECK_SECONDS
        next_console = self.clock.now() + CONSOLE_REFRESH_SECONDS
        while not self.clock.wait(self.stopping, 1.0):
            if self.clock.now() >= next_console:
                next_console = self.clock.now() + CONSOLE_REFRESH_SECONDS
                self.post(self.consoles.refresh)
            if self.clock.now() >= next_refresh:
                next_refresh = self.clock.now() + refresh_every
                self.post(self.refresh_inventory)
            if self.clock.now() >= next_mdserver_check:
                # If the metadata server died, guests booting now would miss it.
                next_mdserver_check = self.clock.now() + MDSERVER_CHECK_SECONDS
                self.post(self.ensure_mdserver)

    def refresh_inventory(self) -> None:
        """Inventory measured again (pushed to Placement if it changed), and our capacity
        account published again with it."""
        self.registration.refresh_inventory()
        self.capacity.mark(*self.hosts)

    # ------------------------------------------------------------------ watch

    def watch_loop(self) -> None:
        """The watch thread's work (as `start_threads` runs it): our prefix, until stopped."""
        self.watch = self.make_watch()
        self.watch.run()

    def make_watch(self) -> PrefixWatch:
        """Our prefix from the revision after the last reconcile; a compaction has the main
        loop reconcile again (`watching.py`)."""
        return PrefixWatch(
            self.store, self.watch_prefix, on_event=self._watch_event,
            resync=on_owner_thread(self.post, self.reconcile, self.stopping.is_set),
            start_revision=self.next_revision, name="watch", log=LOG)

    def _watch_event(self, event: Any) -> None:
        compute_metrics.event_arrived(event)
        self.post(self.on_watch_event, (event,))

    def on_watch_event(self, event: Any) -> None:
        compute_metrics.event_handled(event)
        deleted = isinstance(event, pyetcd.events.DeleteEvent)
        key = self.keys.parse_host_key(event.key.decode())
        if key is not None and key.kind == EXTERNAL_EVENTS and key.host in self.hosts:
            self.machine.plugging.on_events(key.host, key.uuid, None if deleted else event.value)
            return
        parsed = self.keys.parse_spec(event.key.decode())
        if parsed is None or parsed[0] not in self.hosts:
            self.capacity.seen(event.mod_revision)
            return
        self.capacity.spec(parsed[0], parsed[1], None if deleted else event.value,
                           event.mod_revision)
        if deleted:
            # We delete host keys ourselves when an instance is gone; one handed to another
            # host after a cold move leaves its stopped copy here to remove.
            self.machine.moves.on_spec_gone(parsed[0], parsed[1])
            return
        self.machine.on_spec(parsed[0], parsed[1], event.value, event.mod_revision)

    # ------------------------------------------------------------- reconcile

    def unfence(self) -> None:
        """The lease is ours again: back to work, and put the guests right."""
        # The fence stopped the pool: the jobs it had died with their workers, and a
        # stopped pool does not always say so. Forget them; the reconcile resumes each.
        self.machine.forget_jobs("cut by the fence")
        self.fencer.lift()
        self.reconcile()

    def reconcile(self) -> int:
        """Compare etcd, records and the driver; finish what is pending; power on what is
        ours and stopped; destroy what is no longer ours. The revision our prefix was read
        at (the watch goes on after it)."""
        self.remove_odd_keys()
        entries, revision = self.store.get_prefix(self.watch_prefix)
        wanted: set[str] = set()
        specs: dict[str, dict[str, bytes]] = {}
        for entry in entries:
            parsed = self.keys.parse_spec(entry.key)
            if parsed is None or parsed[0] not in self.hosts:
                continue
            wanted.add(parsed[1])
            specs.setdefault(parsed[0], {})[parsed[1]] = entry.value
            self.machine.on_spec(parsed[0], parsed[1], entry.value, entry.mod_revision)
        self.capacity.reset(specs, revision)
        self.next_revision = max(self.next_revision, revision + 1)
        try:
            held = self.pool.run(worker.list_instances)
            running = self.pool.run(worker.running)
            self._put_guests_right(held, running, wanted,
                                   self.pool.run(worker.port_ledgers) - held)
        except Exception as exc:  # a broken driver must not stop the daemon
            LOG.warning("reconcile: could not list or fix driver instances: %s", exc)
            return revision
        self.power.reconciled()
        LOG.info("reconciled %d spec(s) at revision %d; %d instance(s) in the driver",
                 len(wanted), revision, len(held))
        return revision

    def _put_guests_right(self, held: set[str], running: set[str], wanted: set[str],
                          ported: set[str] | None = None) -> None:
        """A guest no spec of ours asks for was moved or deleted while we were away (or
        down): destroy it here, claims untouched; so are the Neutron ports of an instance
        without a guest here (`ported`: a failed build's release that met an outage). One
        that is ours, ACTIVE and stopped (a fence, a reboot of the host) is powered on
        again; a SHUTOFF one stays off."""
        in_flight = set(self.machine.jobs)
        for uuid in sorted((held | (ported or set())) - wanted - in_flight):
            instance_log(uuid).warning(
                "orphan: the driver holds instance %s but no spec asks for it (moved or "
                "deleted while this host was away); destroying it here" if uuid in held else
                "orphan: the Neutron ports of instance %s are not all released and no spec "
                "asks for it; releasing them", uuid)
            self.pool.run(worker.destroy, uuid, timeout=self.settings["job_timeout_seconds"])
        for uuid in sorted((held & wanted) - running - in_flight):
            rp = next((rp for rp in self.hosts
                       if records.read_record(self.store, rp, uuid).state == states.ACTIVE),
                      None)
            if rp is not None and self.pool.run(worker.power_on, uuid):
                instance_log(uuid).info("powered on again (it is ours and ACTIVE)")

    def remove_odd_keys(self) -> None:
        """Keys under our hosts' prefixes that are no instance key of ours (extra or empty
        segments, an unknown kind, no uuid) are logged once and removed: nothing else would
        ever read or delete them."""
        prefixes = ([self.keys.host(rp) for rp in self.hosts] if len(self.hosts) == 1
                    else [self.keys.hosts()])
        for prefix in prefixes:
            entries, _ = self.store.get_prefix(prefix, keys_only=True)
            for entry in entries:
                host = entry.key[len(self.keys.hosts()):].split("/", 1)[0]
                if host not in self.hosts:
                    continue  # another host's (simulated hosts watch all of /hosts/)
                parsed = self.keys.parse_host_key(entry.key)
                if parsed is not None and UUID.match(parsed.uuid):
                    continue
                LOG.warning("removing %r: not an instance key of ours", entry.key[:300])
                ownership.drop_key(self.store, entry.key, entry.mod_revision)
