"""A build on Neutron ports ends ACTIVE only once Neutron says they are up: Nova's wait for
`network-vif-plugged` (its libvirt driver's `_create_guest_with_network`), on this
daemon's main loop, never a sleep in it.

When a build's worker returns the ports it plugged (`result["ports"]`), its instance stays
BUILDING and a wait takes the build's place among the machine's jobs: a job of kind BUILD
whose future is settled here, so everything that meets a running build meets it too (a
destroy cancels it and the destroy runs; a fence or restart forgets it, and the resumed
build waits again). Its future:

- succeeds once a `network-vif-plugged` event with status `completed` has arrived for each
  port (events that came before the wait count: the instance's key is read when it
  starts, and the watch hands over every change after), and the build ends as any build
  (`ends.finish_build`, marked PLUGGED so it is not waited for twice);
- fails with the one-line reason when an event says `failed`, or when
  `vif_plugging_timeout` passes first, if `vif_plugging_is_fatal`: the existing
  failed-build path (cleanup, the claim freed or handed over, ERROR with the reason);
- otherwise (not fatal) succeeds anyway, with a warning.

The events come from the compute API (`instances/external_events.py`). A build without
ports (the libvirt backend, `networks: none`) never waits.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from etcd_compute.compute import metrics as compute_metrics
from etcd_compute.compute.pool import BUILD, Job
from etcd_compute.errors import BuildError
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import external_events
from etcd_compute.keys import EXTERNAL_EVENTS

LOG = logging.getLogger("etcd_compute.compute")

# In a build's result: its ports were waited for (or need not be).
PLUGGED = "ports_up"
Post = Callable[[Callable[..., None], tuple[Any, ...]], None]
Later = Callable[..., None]


def instance_log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


class PortsNotUp(BuildError):
    """Neutron did not say the ports are up (failed, or not in time) and that is fatal."""


@dataclass
class Wait:
    job: Job
    host: str
    ports: list[str]
    result: dict[str, Any]


class PlugWaits:
    """The builds waiting for their ports, by instance uuid."""

    def __init__(self, store: KeyValueStore, jobs: dict[str, Job], post: Post, later: Later,
                 on_job_done: Callable[[Job], None], settings: dict[str, Any] | None = None):
        """`settings`: `network.neutron` (vif_plugging_timeout, vif_plugging_is_fatal);
        None: never waits."""
        self.store, self.jobs, self.post, self.later = store, jobs, post, later
        self.on_job_done = on_job_done
        self.timeout = float((settings or {}).get("vif_plugging_timeout") or 0)
        self.fatal = bool((settings or {}).get("vif_plugging_is_fatal", True))
        self.waits: dict[str, Wait] = {}

    def wait_for(self, job: Job) -> bool:
        """A build's worker returned (`job`, done without error): True if its instance now
        waits for its ports (the wait is its job from here on), False if it may end now."""
        result = job.future.result() or {}
        ports = [str(p) for p in result.get("ports") or []]
        if not ports or result.get(PLUGGED) or self.timeout <= 0:
            return False
        future: concurrent.futures.Future = concurrent.futures.Future()
        waiting = Job(BUILD, job.uuid, job.spec, future, job.record_revision,
                      blame_host=job.blame_host, started=job.started)
        compute_metrics.counted_already(waiting)  # when its worker returned
        wait = self.waits[job.uuid] = Wait(waiting, job.spec["host"], ports, result)
        self.jobs[job.uuid] = waiting
        future.add_done_callback(lambda _f: self.post(self._done, (wait,)))
        instance_log(job.uuid).info("waiting up to %g s for network-vif-plugged of port(s) %s",
                                    self.timeout, ", ".join(ports))
        self.later(self.timeout, self.post, self._timed_out, (wait,))
        self._look(wait, external_events.read(self.store, wait.host, job.uuid))
        return True

    def on_events(self, host: str, uuid: str, value: bytes | None) -> None:
        """The instance's external events key changed (`value`: what it holds now)."""
        wait = self.waits.get(uuid)
        if wait is not None and wait.host == host and value is not None:
            self._look(wait, external_events.decode(uuid, value))

    def resync(self, prefix: str) -> int:
        """Every waiting build's events read again (a watch's history was lost): the
        revision read at."""
        entries, revision = self.store.get_prefix(prefix)
        for entry in entries:
            parsed = self.store.keys.parse_host_key(entry.key)
            if parsed is not None and parsed.kind == EXTERNAL_EVENTS:
                self.on_events(parsed.host, parsed.uuid, entry.value)
        return revision

    def _look(self, wait: Wait, events: external_events.Events) -> None:
        if wait.job.future.done():
            return
        plugged, failed = external_events.vif_plugged(events, wait.ports)
        log = instance_log(wait.job.uuid)
        if failed and self.fatal:
            self._fail(wait, f"Neutron says port(s) {', '.join(sorted(failed))} failed to "
                             "plug (network-vif-plugged failed)")
        elif plugged | failed >= set(wait.ports):
            if failed:
                log.warning("Neutron says port(s) %s failed to plug; running anyway "
                            "(vif_plugging_is_fatal is false)", ", ".join(sorted(failed)))
            log.info("port(s) up: %s", ", ".join(sorted(plugged)) or "none")
            wait.job.future.set_result({**wait.result, PLUGGED: True})

    def _timed_out(self, wait: Wait) -> None:
        if self.waits.get(wait.job.uuid) is not wait or wait.job.future.done():
            return
        missing = [p for p in wait.ports if p not in external_events.vif_plugged(
            external_events.read(self.store, wait.host, wait.job.uuid), wait.ports)[0]]
        if not missing:  # (the last event and the timer crossed)
            wait.job.future.set_result({**wait.result, PLUGGED: True})
            return
        reason = (f"port(s) {', '.join(missing)} not up within {self.timeout:g} s "
                  "(no network-vif-plugged from Neutron)")
        if self.fatal:
            self._fail(wait, reason)
            return
        instance_log(wait.job.uuid).warning("%s; running anyway (vif_plugging_is_fatal is "
                                            "false)", reason)
        wait.job.future.set_result({**wait.result, PLUGGED: True})

    def _fail(self, wait: Wait, reason: str) -> None:
        instance_log(wait.job.uuid).error("%s", reason)
        wait.job.future.set_exception(PortsNotUp(reason))

    def _done(self, wait: Wait) -> None:
        """The wait ended (plugged, failed, timed out, or cancelled by a destroy): the
        machine ends the build as any other."""
        if self.waits.get(wait.job.uuid) is wait:
            del self.waits[wait.job.uuid]
        self.on_job_done(wait.job)
