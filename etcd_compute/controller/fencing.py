"""Fencing a dead host before recovering its instances (docs/explanation/host-failure.md).

    fencing = Fencing(settings["fencing"])
    fencing.begin(host, name, address, uuids)   # when its heartbeat is gone
    fencing.verdict(host)                        # None while trying; a Verdict once done
    fencing.forget(host)                         # it came back, or it was recovered

A host whose heartbeat lease expired powered its guests off itself before the lease
could expire, unless only its compute daemon died (SIGKILL, the OOM killer): then its
guests run on, and its libvirtd still answers. So, in a thread of its own per host,
in order, each a command bounded by its timeout (killed, with its process group, at
the timeout):

1. through its libvirtd over TLS (`through_libvirt`, the one way a fence goes through
   libvirt): the fence helper (`python -m etcd_compute.virt.remote_fence`, with the
   controller's libvirt client certificates) checks the libvirtd's certificate names
   the host (its name in Placement: the address is the host's own word), destroys the
   guests of the named instances there and looks that none runs; exit 0 is fenced;
2. a configured fence agent's command line (an IPMI or Redfish agent: `fence_ipmilan
   ...`), `{host}`, `{name}` and `{address}` replaced in its arguments; its exit status
   is the verdict.

A host fenced either way is recovered at once; one neither fenced waits out TTL + grace
as without fencing. The verdict says which path decided, for the instances' events and
the metrics.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from etcd_compute.children import module_command
from etcd_compute.controller import metrics as controller_metrics

LOG = logging.getLogger("etcd_compute.controller")

LIBVIRT, COMMAND = "libvirt", "command"
# The libvirt fence helper, a child of ours (the operator's side never imports virt/).
REMOTE_FENCE = "etcd_compute.virt.remote_fence"
FENCED, REFUSED, TIMEOUT = "fenced", "refused", "timeout"


@dataclass(frozen=True)
class Verdict:
    """How fencing a host ended: fenced or not, by which path, why, in how long."""

    fenced: bool
    path: str | None          # libvirt, command, or None (nothing was tried)
    detail: str
    seconds: float = 0.0

    def how(self) -> str:
        """For an instance's recovery event."""
        if self.fenced:
            return f"its host fenced ({self.detail}) after {self.seconds:.1f} s"
        return f"its host not fenced ({self.detail}): recovered after TTL + grace"


@dataclass(frozen=True)
class Attempt:
    """One fence: which path, how it ended, its last line in a few words, and (through
    libvirt) the guests it destroyed."""

    path: str
    outcome: str
    detail: str
    seconds: float
    destroyed: tuple[str, ...] = ()


def helper_command(address: str, pki_dir: str, name: str, uuids: list[str],
                   timeout: float = 10.0) -> list[str]:
    """The libvirt fence helper's command line (run by this Python, as a fence agent)."""
    return module_command(REMOTE_FENCE, "--address", address, "--pki-dir", pki_dir,
                          "--name", name, "--timeout", f"{timeout:g}", *uuids)


def through_libvirt(address: str, pki_dir: str, name: str, uuids: list[str],
                    timeout: float, runner: Callable[[list[str], float, str], Attempt] | None
                    = None) -> Attempt:
    """Fence host `name` through its libvirtd at `address`: the named instances' guests
    destroyed there, and none of them running, within `timeout` (the helper killed with
    its process group past it)."""
    return (runner or run)(helper_command(address, pki_dir, name, uuids, timeout), timeout,
                           LIBVIRT)


def agent_command(template: list[str], host: str, name: str, address: str | None
                  ) -> list[str]:
    """The configured agent's arguments with {host}, {name} and {address} replaced (each
    argument on its own: nothing reaches a shell)."""
    values = {"host": host, "name": name, "address": address or ""}
    return [argument.format_map(values) for argument in template]


def run(argv: list[str], timeout: float, path: str) -> Attempt:
    """`argv` in a session of its own; killed with its process group at `timeout`."""
    started = time.monotonic()
    try:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        return Attempt(path, REFUSED, f"{argv[0]}: {exc.strerror or exc}", 0.0)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return Attempt(path, TIMEOUT, f"no answer within {timeout:g} s",
                       time.monotonic() - started)
    seconds = time.monotonic() - started
    detail, destroyed = _last_line(path, process.returncode, out, err)
    return Attempt(path, FENCED if process.returncode == 0 and (path != LIBVIRT or
                                                                  destroyed is not None)
                   else REFUSED, detail, seconds, tuple(destroyed or ()))


def _last_line(path: str, status: int, out: str, err: str) -> tuple[str, list[str] | None]:
    """What the last line says, and (the libvirt helper's answer) the guests it destroyed;
    None: no answer of the helper's (not fenced, whatever its status)."""
    if path == LIBVIRT:
        with contextlib.suppress(ValueError, IndexError, KeyError, TypeError):
            answer = json.loads(out.strip().splitlines()[-1])
            destroyed = [str(uuid) for uuid in answer["destroyed"]]
            if status == 0 and answer["outcome"] == "fenced":
                return f"{len(destroyed)} guest(s) destroyed through its libvirtd", destroyed
            return f"libvirtd: {answer['reason']}"[:300], None
    lines = (err or out).strip().splitlines()
    tail = f": {lines[-1][:200]}" if lines else ""
    return f"{'fence command' if path == COMMAND else path} exit {status}{tail}", None


class Fencing:
    """Fences run per host in threads; `verdict` polls them (the controller's loop)."""

    def __init__(self, settings: dict[str, Any] | None,
                 runner: Callable[[list[str], float, str], Attempt] = run):
        settings = settings or {}
        self.pki_dir = settings.get("libvirt_pki_dir")
        self.libvirt_timeout = float(settings.get("libvirt_timeout_seconds", 10))
        self.command = settings.get("command")
        self.command_timeout = float(settings.get("command_timeout_seconds", 60))
        self.runner = runner
        self._lock = threading.Lock()
        self._verdicts: dict[str, Verdict | None] = {}
        # Which fence of a host is its current one: a fence forgotten while it ran (the
        # host came back, maybe died again) never writes the verdict of a later failure.
        self._current: dict[str, object] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.pki_dir or self.command)

    def begin(self, host: str, name: str | None, address: str | None, uuids: list[str],
              on_done: Callable[[str], None] | None = None) -> None:
        """Start fencing `host` (once: again only after `forget`); `name` is the host's
        name as Placement has it (its libvirtd's certificate must bear it: None, unknown,
        then no fence goes through libvirt)."""
        with self._lock:
            if host in self._verdicts or not self.enabled:
                return
            self._verdicts[host] = None
            self._current[host] = fence = object()
        threading.Thread(target=self._fence,
                         args=(host, fence, name, address, uuids, on_done),
                         name=f"fence-{host[:8]}", daemon=True).start()

    def verdict(self, host: str) -> Verdict | None:
        with self._lock:
            return self._verdicts.get(host)

    def forget(self, host: str) -> None:
        with self._lock:
            self._verdicts.pop(host, None)
            self._current.pop(host, None)

    def _fence(self, host: str, fence: object, name: str | None, address: str | None,
               uuids: list[str], on_done: Callable[[str], None] | None) -> None:
        started = time.monotonic()
        attempts = []
        if self.pki_dir and address and name and uuids:
            attempts.append(through_libvirt(address, self.pki_dir, name, uuids,
                                            self.libvirt_timeout, self.runner))
        if self.command and not any(a.outcome == FENCED for a in attempts):
            attempts.append(self.runner(agent_command(self.command, host, name or host,
                                                      address),
                                        self.command_timeout, COMMAND))
        fenced = next((a for a in attempts if a.outcome == FENCED), None)
        if fenced is not None:
            verdict = Verdict(True, fenced.path, fenced.detail, time.monotonic() - started)
        elif attempts:
            verdict = Verdict(False, attempts[-1].path,
                              "; ".join(f"{a.path}: {a.detail}" for a in attempts),
                              time.monotonic() - started)
        else:
            verdict = Verdict(False, None, "no libvirt address or name known and no fence command",
                              time.monotonic() - started)
        for attempt in attempts:
            controller_metrics.fence_tried(attempt.path, attempt.outcome)
        (LOG.warning if verdict.fenced else LOG.error)(
            "host %s (%s): %s", host, name or "name unknown", verdict.how())
        with self._lock:
            if self._current.get(host) is fence:  # not forgotten meanwhile
                self._verdicts[host] = verdict
        if on_done is not None:
            on_done(host)
