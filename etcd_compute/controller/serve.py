"""`schedule.py serve`: the controller daemon, leader-elected, with the operator's privileges.

Run one or more (a systemd unit on two machines, say): exactly one leads
(`election.py`), the others wait to take over within seconds. The leader
reads everything once (`Controller.sweep`, the scheduler service's host
cache), then follows every change under its prefix from that revision on
(one `watching.PrefixWatch`) and hands each event to `Controller`. If etcd
compacted the history the watch needs, the leader reads everything again
(on this thread) and the watch goes on from there. One thread decides (this
one); the watch thread only queues events.

Leadership is followed, not assumed: when a lease refresh comes late (a
frozen process, an etcd election, a lost quorum), the leader stops acting
before its lease could run out, keeps trying to refresh, and acts again as
soon as etcd confirms the lease still lives; the scheduler service pauses
and resumes with it. Only a lease etcd forgot (or one we gave up) ends the
lead; then it campaigns again.

The leader also runs the scheduler service (`queue_service.py`, unless
`scheduler.service` is false): its own thread drains the request queue,
planning on a host cache (`hostcache.py`) that the same watch keeps current.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading
from collections.abc import Callable
from typing import Any

import pyetcd.events

from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.controller import metrics as controller_metrics
from etcd_compute.controller.decisions import Controller
from etcd_compute.controller.election import Election
from etcd_compute.controller.hostcache import HostCache
from etcd_compute.controller.queue_service import QueueService
from etcd_compute.errors import EtcdComputeError, ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.hosts import host_of
from etcd_compute.keys import RECORDS
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler import evacuation
from etcd_compute.scheduler.scheduler import Scheduler
from etcd_compute.watching import PrefixWatch, on_owner_thread

RECOVERY_TICK_SECONDS = 0.2
# While leadership is unconfirmed, how often the lease refresh is tried again.
PAUSED_REFRESH_SECONDS = 0.2
LOG = logging.getLogger("etcd_compute.controller")

Event = tuple[Callable[..., None], tuple[Any, ...]]


class ControllerService:
    def __init__(self, config: dict[str, Any], clock: Clock = SYSTEM):
        self.config = config
        self.clock = clock
        self.settings = config["scheduler"]
        self.store = Store(config["etcd"])
        self.placement = PlacementClient(config["placement"])
        self.election = Election(self.store, self.settings["controller_lease_ttl"],
                                 clock=clock)
        self.scheduler = Scheduler(config, store=self.store, placement=self.placement)
        self.controller = Controller(
            self.store, self.placement, self.settings, place=self.scheduler.place,
            place_many=lambda specs, exclude: evacuation.place_many(self.scheduler, specs,
                                                                    exclude),
            clock=clock.now)
        self.cache = HostCache(self.store.keys)
        self.service: QueueService | None = None
        if self.settings["service"]:
            # Its own thread: its own Placement session and Scheduler (same etcd client).
            placement = PlacementClient(config["placement"])
            self.service = QueueService(
                self.store, placement, Scheduler(config, store=self.store, placement=placement),
                self.election, self.cache, self.settings, clock)
        self.events: queue.Queue[Event] = queue.Queue()
        self.stopping = threading.Event()
        self.watch: PrefixWatch | None = None

    def stop(self, *_args: Any) -> None:
        self.stopping.set()

    def run(self, install_signal_handlers: bool = True) -> int:
        if install_signal_handlers:
            signal.signal(signal.SIGTERM, self.stop)
            signal.signal(signal.SIGINT, self.stop)
        election = self.election
        controller_metrics.start(self.config, lambda: election.is_leader)
        LOG.info("controller %s starting (lease %d s)", self.election.name,
                 self.settings["controller_lease_ttl"])
        try:
            while not self.stopping.is_set():
                if self._campaign():
                    self._lead()
                else:
                    self.clock.wait(self.stopping, 1.0)
        finally:
            self._stop_watch()
            self.election.resign()
            self.store.close()
            LOG.info("controller stopped")
        return 0

    def _campaign(self) -> bool:
        try:
            return self.election.campaign()
        except EtcdComputeError as exc:  # unreachable, or refused for now: one line, again
            controller_metrics.retried("campaign", exc)
            LOG.warning("%s; retrying", exc)
            return False

    # --- leading ------------------------------------------------------------------------

    def read_everything(self) -> int:
        """Act on everything as it is now (the sweep), and load the service's host cache:
        the revision read at (the watch goes on after it). At the start of a lead, and
        when the watch lost history (etcd compacted it)."""
        _, revision = self.store.get_prefix(self.store.keys.leader())
        LOG.info("sweep: %s", self.controller.sweep())
        if self.service is not None:
            self.cache.load(self.store)
            self.service.wake()  # requests may have come unseen
        return revision

    def _lead(self) -> None:
        try:
            revision = self.read_everything()
        except EtcdComputeError as exc:
            LOG.warning("sweep failed (%s); giving up leadership", exc)
            self.election.resign()
            return
        self._start_watch(revision + 1)
        if self.service is not None:
            self.service.start()
        clock = self.clock
        next_refresh = next_tick = clock.now()
        paused = False
        while not self.stopping.is_set():
            if clock.now() >= next_refresh:
                next_refresh = clock.now() + self.election.ttl / 3
                self.election.refresh()
            if self.election.lease is None:
                break  # etcd forgot our lease, or we gave it up: campaign afresh
            if not self.election.is_leader:
                # We may no longer lead: act on nothing, and ask again soon; etcd may say
                # the lease lives (then we lead on) or that it is gone (then we stop).
                if not paused:
                    paused = True
                    LOG.warning("leadership unconfirmed: acting on nothing until the lease "
                                "is refreshed")
                next_refresh = min(next_refresh, clock.now() + PAUSED_REFRESH_SECONDS)
                clock.wait(self.stopping, PAUSED_REFRESH_SECONDS)
                continue
            if paused:
                paused = False
                LOG.info("leadership confirmed again: acting")
            if clock.now() >= next_tick:
                # Often: a dead host's grace ends between two ticks, and recovery waits for
                # the next one (a dict walk when no host is down).
                next_tick = clock.now() + RECOVERY_TICK_SECONDS
                self._dispatch(self.controller.recover_due, ())
            try:
                handler, args = clock.get(self.events, RECOVERY_TICK_SECONDS)
            except queue.Empty:
                continue
            if not self.election.is_leader:
                self.events.put((handler, args))  # never acted on while we may not lead
                continue
            self._dispatch(handler, args)
        if self.service is not None:
            self.service.stop()
        self._stop_watch()
        with self.events.mutex:
            self.events.queue.clear()

    def _dispatch(self, handler: Callable[..., None], args: tuple[Any, ...]) -> None:
        try:
            handler(*args)
            controller_metrics.event_handled(handler)
        except ServiceUnavailable as exc:
            controller_metrics.retried("dispatch", exc)
            LOG.warning("%s; retrying in 1 s", exc)
            self.clock.later(1.0, self.events.put, (handler, args))
        except Exception:
            controller_metrics.event_handled(handler, "error")
            LOG.exception("unexpected error handling %s", getattr(handler, "__name__", handler))

    # --- the watch ----------------------------------------------------------------------

    def _start_watch(self, revision: int) -> None:
        """Everything under our prefix, from `revision`: one stream, one revision, one read
        again when etcd compacted what it needs."""
        leading = self.watch = PrefixWatch(
            self.store, self.store.keys.everything(), on_event=self._queue,
            resync=on_owner_thread(lambda job: self.events.put((job, ())),
                                   self.read_everything,
                                   lambda: self.stopping.is_set() or leading.cancelled),
            start_revision=revision, name="controller watch", log=LOG)
        leading.start()

    def _stop_watch(self) -> None:
        if self.watch is not None:
            self.watch.cancel()
            self.watch = None

    def _queue(self, event: Any) -> None:
        key = event.key.decode()
        deleted = isinstance(event, pyetcd.events.DeleteEvent)
        if self.service is not None:
            if key.startswith(self.store.keys.queue_requests()):
                if not deleted:
                    self.service.wake()
                return
            self.cache.apply(key, None if deleted else event.value, event.mod_revision)
            if key.startswith(self.store.keys.stats_prefix()):
                return
        if key.startswith(self.store.keys.alive_prefix()):
            host = host_of(key)
            present = not isinstance(event, pyetcd.events.DeleteEvent)
            self.events.put((self.controller.on_alive, (host, present)))
            return
        parsed = self.store.keys.parse_host_key(key)
        if parsed is None or parsed.kind != RECORDS:
            return
        if isinstance(event, pyetcd.events.DeleteEvent):
            self.events.put((self.controller.on_record_gone, (parsed.host, parsed.uuid)))
        else:
            self.events.put((self.controller.on_record, (parsed.host, parsed.uuid)))
