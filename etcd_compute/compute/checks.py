"""Verify before acting: a host builds only what Placement says it holds the claim for.

Whoever can write a spec to a host's key is not trusted to have claimed
capacity: a spec written straight to etcd would bypass it, and a spec for
an instance claimed on another host would build it twice. Placement's
allocations for the consumer are the proof, judged by one rule,
`claims.judge` (this consumer, this provider alone, exactly the amounts
asked); this module is what the compute does with its answer:

- A spec that arrives with no record of ours was not written by the
  scheduler (which writes the SCHEDULED record with the spec): its claim is
  checked before anything is written (`check_unrecorded`).
- A scheduled spec's record moves to BUILDING at once, and its claim is
  checked off the main loop, beside the image fetch (`ClaimChecks`,
  `verified`); the build itself, the first thing that defines anything of
  the guest, is submitted only once the claim is held (`machine.py`). The
  image fetched meanwhile is only cache.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable
from typing import Any, Protocol

from etcd_compute import claims
from etcd_compute.etcd import KeyValueStore
from etcd_compute.instances import host as host_txn
from etcd_compute.instances import ownership
from etcd_compute.placement import PlacementClient

LOG = logging.getLogger("etcd_compute.compute")

# What check_unrecorded decides.
BUILD, REFUSED = "build", "refused"


def check_unrecorded(store: KeyValueStore, placement: PlacementClient, spec: dict[str, Any],
                     spec_revision: int) -> str:
    """BUILD if Placement holds the spec's claim here; else the spec is dealt with
    (REFUSED), nothing built: a claim elsewhere means a stray copy, dropped with no record
    here; any other ends in ERROR with the reason (a claim here alone with other amounts
    is freed; a split one is not this host's to free)."""
    uuid, host = spec["uuid"], spec["host"]
    log = logging.LoggerAdapter(LOG, {"instance": uuid})
    holding = claims.holding(placement, uuid, host, spec["resources"])
    if holding.held:
        return BUILD
    if holding.verdict == claims.OTHER_HOST:
        log.error("refused: %s; spec %s dropped", holding.why(), store.keys.spec(host, uuid))
        ownership.drop_key(store, store.keys.spec(host, uuid), spec_revision)
        return REFUSED
    reason = f"refused: {holding.why()}"
    log.error("%s", reason)
    claims.free_here(placement, uuid, host)
    host_txn.reject(store, host, uuid, spec_revision, reason)
    return REFUSED


class Runner(Protocol):
    """Runs a call elsewhere and hands back its future (the worker pool's shape)."""

    def schedule(self, function: Callable[..., Any], *args: Any,
                 timeout: float) -> concurrent.futures.Future: ...


class ThreadRunner:
    """Runs calls in a thread of the daemon's main process (not the main loop's)."""

    def __init__(self, name: str = "claim-check", threads: int = 1):
        self._executor = concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)

    def schedule(self, function: Callable[..., Any], *args: Any,
                 timeout: float) -> concurrent.futures.Future:
        return self._executor.submit(function, *args)

    def stop(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class ClaimChecks:
    """Claims judged off the main loop: a Placement client of their own (the main loop's
    is not shared across threads) and a runner (a thread; the fake pool in unit tests)."""

    def __init__(self, placement: PlacementClient, runner: Runner):
        self.placement = placement
        self.runner = runner

    def start(self, spec: dict[str, Any], resources: dict[str, int],
              timeout: float) -> concurrent.futures.Future:
        """A future of the spec's claim judged for its host and `resources` (a Holding)."""
        return self.runner.schedule(claims.holding, self.placement, spec["uuid"],
                                    spec["host"], resources, timeout=timeout)

    def stop(self) -> None:
        if isinstance(self.runner, ThreadRunner):
            self.runner.stop()


def verified(check: concurrent.futures.Future,
             fetch: concurrent.futures.Future) -> concurrent.futures.Future:
    """One future for a claim check and the image fetch beside it: done with the check's
    Holding once the claim is held and the fetch is over (however it went: its image is
    only cache), or at once when the check says no or fails (the fetch is cancelled).
    Cancelling it cancels both."""
    done: concurrent.futures.Future = concurrent.futures.Future()

    def settle(_finished: concurrent.futures.Future) -> None:
        if done.done() or not check.done():
            return
        try:
            if check.cancelled():
                fetch.cancel()
                done.cancel()
            elif check.exception() is not None:
                fetch.cancel()
                done.set_exception(check.exception())  # type: ignore[arg-type]
            elif not check.result().held:
                fetch.cancel()
                done.set_result(check.result())
            elif fetch.done():
                done.set_result(check.result())
        except concurrent.futures.InvalidStateError:
            pass  # settled by the other future's callback, or cancelled meanwhile

    def on_cancel(finished: concurrent.futures.Future) -> None:
        if finished.cancelled():
            check.cancel()
            fetch.cancel()

    done.add_done_callback(on_cancel)
    check.add_done_callback(settle)
    fetch.add_done_callback(settle)
    return done
