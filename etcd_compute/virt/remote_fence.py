"""Fencing a host through its own libvirtd: its guests of the named instances destroyed, and
confirmed gone, before those instances start anywhere else.

    verdict = fence(peer_uri("10.0.0.2", pki_dir), [uuid, ...], timeout=15)
    verdict.fenced        # True only when libvirtd answered and none of them runs there

A compute daemon killed on a machine that keeps running leaves its guests running
(README, "When a host dies"); its libvirtd still answers, over TLS with the
cluster's libvirt certificates. The work runs in a child process
(`python -m etcd_compute.virt.remote_fence --address ADDR --pki-dir DIR UUID...`, or
`--uri URI`; what the controller runs as a fence agent: exit 0 is fenced, the last
line is the verdict in JSON) killed at the timeout: a
libvirtd behind a pulled cable leaves a TCP connect or a call hanging for
minutes, and a hung libvirt call cannot be interrupted in a thread. Only domains
that are ours (our metadata) and named by the given uuids are touched: destroyed
(powered off), not undefined; the host's compute removes them when it is back.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from etcd_compute.children import module_command

FENCED, UNREACHABLE, FAILED = "fenced", "unreachable", "failed"


@dataclass(frozen=True)
class Verdict:
    outcome: str                       # fenced, unreachable or failed
    destroyed: list[str] = field(default_factory=list)   # running there, powered off now
    reason: str = ""                   # one line, when not fenced
    seconds: float = 0.0

    @property
    def fenced(self) -> bool:
        return self.outcome == FENCED


MODULE = "etcd_compute.virt.remote_fence"


def command(uri: str, uuids: list[str]) -> list[str]:
    return module_command(MODULE, "--uri", uri, *uuids)


def fence(uri: str, uuids: list[str], timeout: float) -> Verdict:
    """Run the fence in a child process; `unreachable` if it has not answered in time."""
    started = time.monotonic()
    try:
        done = subprocess.run(command(uri, uuids), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        # subprocess.run killed it (by its pid) before raising.
        return Verdict(UNREACHABLE, reason=f"libvirtd did not answer within {timeout:g}s",
                       seconds=time.monotonic() - started)
    try:
        answer = json.loads(done.stdout.strip().splitlines()[-1])
        verdict = Verdict(str(answer["outcome"]), [str(u) for u in answer["destroyed"]],
                          str(answer["reason"])[:500])
    except (ValueError, IndexError, KeyError, TypeError):
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        verdict = Verdict(FAILED, reason=f"fence helper: {why[:300]}")
    if verdict.outcome not in (FENCED, UNREACHABLE, FAILED):
        verdict = Verdict(FAILED, reason=f"fence helper: unknown outcome {verdict.outcome!r}")
    return Verdict(verdict.outcome, verdict.destroyed, verdict.reason,
                   time.monotonic() - started)


def fence_here(uri: str, uuids: list[str]) -> dict[str, Any]:
    """In the child: connect, destroy each running domain of ours named by a uuid, and
    look again that none of them runs."""
    import libvirt

    from etcd_compute.virt.domain import is_ours

    try:
        connection = libvirt.open(uri)
    except libvirt.libvirtError as exc:
        return {"outcome": UNREACHABLE, "destroyed": [], "reason": _line(exc)}
    destroyed = []
    try:
        for uuid in uuids:
            try:
                domain = connection.lookupByName(uuid)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                    continue
                raise
            if not is_ours(domain) or not domain.isActive():
                continue
            try:
                domain.destroy()
                destroyed.append(uuid)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() != libvirt.VIR_ERR_OPERATION_INVALID:  # stopped
                    raise
        # Looked at again: a guest of ours that runs now (restarted meanwhile?) is a failure.
        active = {d.name() for d in connection.listAllDomains(
            libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE) if is_ours(d)}
        still = sorted(active & set(uuids))
        if still:
            return {"outcome": FAILED, "destroyed": destroyed,
                    "reason": f"still running after destroy: {', '.join(still)}"}
        return {"outcome": FENCED, "destroyed": destroyed, "reason": ""}
    except libvirt.libvirtError as exc:
        return {"outcome": FAILED, "destroyed": destroyed, "reason": _line(exc)}
    finally:
        try:
            connection.close()
        except libvirt.libvirtError:
            pass


def _line(exc: Any) -> str:
    message = exc.get_error_message() or str(exc)
    return (message.splitlines() or [type(exc).__name__])[0][:500]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m etcd_compute.virt.remote_fence",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--uri", help="the libvirtd to fence through")
    parser.add_argument("--address", help="...or the host's address (its libvirtd on TLS)")
    parser.add_argument("--pki-dir", help="with --address: our libvirt client certificates")
    parser.add_argument("uuids", nargs="*")
    args = parser.parse_args(argv)
    from etcd_compute.keys import UUID
    from etcd_compute.virt.migration import peer_uri

    if args.uri is None:
        if not args.address or not args.pki_dir:
            parser.error("give --uri, or --address and --pki-dir")
        try:
            args.uri = peer_uri(args.address, args.pki_dir)
        except ValueError as exc:
            print(json.dumps({"outcome": FAILED, "destroyed": [], "reason": str(exc)[:300]}))
            return 2

    bad = [u for u in args.uuids if not UUID.match(u)]
    if bad:
        print(json.dumps({"outcome": FAILED, "destroyed": [],
                          "reason": f"not an instance uuid: {bad[0][:64]!r}"}))
        return 2
    answer = fence_here(args.uri, args.uuids)
    print(json.dumps(answer))
    return 0 if answer["outcome"] == FENCED else 1


if __name__ == "__main__":
    sys.exit(main())
