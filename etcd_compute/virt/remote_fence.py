"""Fencing a host through its own libvirtd: its guests of the named instances destroyed, and
confirmed gone, before those instances start anywhere else.

    python -m etcd_compute.virt.remote_fence --address ADDR --pki-dir DIR --name HOST UUID...

A compute daemon killed on a machine that keeps running leaves its guests running
(docs/explanation/host-failure.md); its libvirtd still answers, over TLS with the
cluster's libvirt certificates. This is the child process the controller runs for
it, as a fence agent (`controller/fencing.py`, the one way to run it: killed with
its process group at the timeout, since a libvirtd behind a pulled cable leaves a
TCP connect or a call hanging for minutes and a hung libvirt call cannot be
interrupted in a thread). Exit 0 is fenced; the last line is the verdict in JSON.
The libvirtd must present a certificate for HOST (`migration.verify_peer`, the check
every caller of a peer's libvirtd makes): the address is the host's own word, and a
host that lies about it must not turn the fence onto another host's libvirtd (which
would say "none of them runs here" while its guests run on). Only domains that are
ours (our metadata) and named by the given uuids are touched: destroyed (powered
off), not undefined; the host's compute removes them when it is back.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

FENCED, UNREACHABLE, FAILED = "fenced", "unreachable", "failed"
MODULE = "etcd_compute.virt.remote_fence"


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
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True, help="the host's libvirtd (TLS)")
    parser.add_argument("--pki-dir", required=True, help="our libvirt client certificates")
    parser.add_argument("--name", required=True,
                        help="the host's name, which its libvirtd's certificate must bear")
    parser.add_argument("--timeout", type=float, default=10.0,
                        help="seconds for the certificate check's connect")
    parser.add_argument("uuids", nargs="*")
    args = parser.parse_args(argv)
    from etcd_compute.keys import UUID
    from etcd_compute.virt.migration import peer_uri, verify_peer

    bad = [u for u in args.uuids if not UUID.match(u)]
    if bad:
        return _answer(FAILED, f"not an instance uuid: {bad[0][:64]!r}", 2)
    try:
        uri = peer_uri(args.address, args.pki_dir)
        verify_peer(args.address, args.pki_dir, args.name, timeout=args.timeout)
    except ValueError as exc:
        return _answer(FAILED, str(exc), 2)
    except OSError as exc:
        return _answer(UNREACHABLE, f"{args.address}: {exc.strerror or exc}", 1)
    answer = fence_here(uri, args.uuids)
    print(json.dumps(answer))
    return 0 if answer["outcome"] == FENCED else 1


def _answer(outcome: str, reason: str, status: int) -> int:
    print(json.dumps({"outcome": outcome, "destroyed": [], "reason": reason[:300]}))
    return status


if __name__ == "__main__":
    sys.exit(main())
