"""A guest's Neutron ports through a move (network.backend neutron), as Nova moves them with
Neutron's port bindings (`binding-extended`: a port has at most one binding per host, one of
them active; `binding:host_id` is the active one's host):

- **prepare** (the destination, before the guest arrives): an inactive binding for this
  host on each of the server's ports, and the guest's ledger written here first (the
  ports it made, the user's own: those its spec names), so a discard after a crash knows
  them; and the port's `binding:profile` says `migrating_to` this host, as Nova's does:
  ML2/OVN then binds the port on both chassis (`requested-chassis` the two), the
  destination's passing traffic only once the guest announces itself there with a RARP
  (OVN's `activation-strategy=rarp`), so the switch-over loses little.
- **activate** (the source, once the guest switched over): each port's binding for the
  destination made the active one, the source's (inactive now) deleted, and the source's
  ledger removed: the ports are the destination's (its ledger), and a release here finds
  none bound to this host. A Neutron that does not answer is retried for a while; past
  that the error is logged with what to run, the guest runs there anyway.
- **arrive** (the destination of a cold move, before it defines the guest): its bindings
  made the active ones; the source's stay, inactive, until **leave** (the source, once the
  hand-over took the guest away) deletes them with the source's ledger.
- **discard** (the destination, the move called off): its bindings deleted (one already
  active first gives the activation back to the source's), its ledger removed; the source
  keeps its bindings and its own ledger, its guest runs on.

The ports keep their ids, MACs and addresses: nothing is made anew. Runs in the pool's
workers (HTTP only).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etcd_compute.compute import ports
from etcd_compute.compute.ports import BINDING_HOST, DEVICE_OWNER
from etcd_compute.errors import NeutronError, NeutronUnavailable, NotFound, RequestError
from etcd_compute.neutron import NeutronClient

LOG = logging.getLogger("etcd_compute.compute.port_moves")

PROFILE = "binding:profile"
MIGRATING_TO = "migrating_to"  # ML2/OVN: the port bound on both chassis while it moves
ACTIVATE_TRIES = 10
RETRY_SECONDS = 3.0


def _log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


def server_ports(neutron: NeutronClient, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The server's ports: of its project, naming it as their device, a compute's."""
    return [p for p in neutron.ports(device_id=spec["uuid"], project_id=spec["project_id"])
            if p.get("device_owner") == DEVICE_OWNER]


def ledger_for(spec: dict[str, Any], found: list[dict[str, Any]]) -> dict[str, Any]:
    """The guest's ledger as its build wrote it: the user's ports are those its spec
    names, the others were made for it."""
    named = {item["port"] for item in spec.get("networks") or [] if "port" in item}
    ids = [p["id"] for p in found]
    return {"project_id": spec["project_id"], "created": [i for i in ids if i not in named],
            "bound": [i for i in ids if i in named]}


def prepare(neutron: NeutronClient, spec: dict[str, Any], host: str,
            state_dir: str | Path) -> list[str]:
    """Before a live move's guest comes here: an inactive binding for `host` on each of its
    ports (the ids). A refusal deletes those made and raises RequestError; the source's
    bindings are untouched."""
    uuid = spec["uuid"]
    if not spec.get("project_id"):
        return []
    found = server_ports(neutron, spec)
    if not found:
        return []
    ports.write_ledger(state_dir, uuid, ledger_for(spec, found))
    made = []
    try:
        for port in found:
            if port.get(BINDING_HOST) == host:
                raise RequestError(f"port {port['id']} is bound to this host already")
            try:
                neutron.create_port_binding(port["id"], host)
            except NeutronError as exc:
                if exc.status != 409:  # 409: it has one for this host (a prepare again)
                    raise RequestError(f"port {port['id']}: no binding for {host}: "
                                       f"{exc}") from None
            made.append(port["id"])
            profile = port.get(PROFILE) or {}
            if profile.get(MIGRATING_TO) != host:
                neutron.update_port(port["id"], {PROFILE: {**profile, MIGRATING_TO: host}})
    except BaseException:
        discard(neutron, uuid, host, state_dir)
        raise
    _log(uuid).info("ports %s: inactive bindings for %s", ", ".join(made), host)
    return made


def _ledgered(state_dir: str | Path, uuid: str) -> list[str]:
    ledger = ports.read_ledger(state_dir, uuid)
    return [] if ledger is None else [*ledger["created"], *ledger["bound"]]


def _activate_one(neutron: NeutronClient, port_id: str, host: str) -> None:
    try:
        neutron.activate_port_binding(port_id, host)
    except NeutronError as exc:
        if exc.status != 409:  # 409: active already (an activation again)
            raise


def activate(neutron: NeutronClient, uuid: str, host: str, source: str,
             state_dir: str | Path, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """The guest switched over to `host`: its ports' bindings there made active, the
    source's deleted, the source's ledger (in `state_dir`) removed. The ports activated.
    Retried while Neutron is unavailable; the guest runs there whatever happens, so a
    failure past that is logged, not raised."""
    port_ids = _ledgered(state_dir, uuid)
    done: list[str] = []
    for tries in range(1, ACTIVATE_TRIES + 1):
        try:
            for port_id in port_ids:
                if port_id in done:
                    continue
                _activate_one(neutron, port_id, host)
                neutron.delete_port_binding(port_id, source)
                done.append(port_id)
            break
        except NeutronUnavailable as exc:
            if tries == ACTIVATE_TRIES:
                _log(uuid).error(
                    "ports %s still bound to %s after the guest moved to %s (%s): activate "
                    "each by hand (PUT /v2.0/ports/<id>/bindings/%s/activate)",
                    ", ".join(p for p in port_ids if p not in done), source, host, exc, host)
                break
            sleep(RETRY_SECONDS)
        except Exception as exc:  # noqa: BLE001 (the guest runs there: the move is done)
            _log(uuid).error("ports of the guest not activated on %s: %s", host, exc)
            break
    ports.ledger_path(state_dir, uuid).unlink(missing_ok=True)
    if done:
        _log(uuid).info("ports %s: bound to %s now (was %s)", ", ".join(done), host, source)
    return done


def arrive(neutron: NeutronClient, spec: dict[str, Any], host: str, state_dir: str | Path,
           bridge: str = "br-int") -> list[dict[str, Any]]:
    """A cold move's guest about to be defined here: its ports' bindings for `host` (made
    by `prepare`) made the active ones; the source's stay, inactive, until it leaves there
    (`leave`), so a move called off can give them back (`discard`). The VIFs to plug, in
    the ledger's order (the ports made, then the user's)."""
    uuid = spec["uuid"]
    vifs = []
    for port_id in _ledgered(state_dir, uuid):
        _activate_one(neutron, port_id, host)
        port = neutron.port(port_id)
        network = neutron.network(port["network_id"])
        vifs.append({"port_id": port_id, "mac": port["mac_address"], "mtu": network.get("mtu"),
                     "bridge": ports.binding_bridge(port, bridge)})
    if vifs:
        _log(uuid).info("ports %s: bound to %s", ", ".join(v["port_id"] for v in vifs), host)
    return vifs


def leave(neutron: NeutronClient, uuid: str, host: str, state_dir: str | Path) -> None:
    """What a cold move left here goes: this host's inactive bindings of the guest's ports,
    and its ledger. A port still active here is left bound (the guest did not leave)."""
    ledger = ports.read_ledger(state_dir, uuid)
    if ledger is None:
        return
    kept = []
    for port_id in [*ledger["created"], *ledger["bound"]]:
        try:
            bound_to = neutron.port(port_id).get(BINDING_HOST)
        except NotFound:
            continue
        if bound_to == host:
            kept.append(port_id)
        else:
            neutron.delete_port_binding(port_id, host)
    if kept:
        _log(uuid).warning("ports %s are still bound to this host: kept", ", ".join(kept))
        return
    ports.ledger_path(state_dir, uuid).unlink(missing_ok=True)


def _forget_destination(neutron: NeutronClient, port_id: str, host: str) -> None:
    """The port's `migrating_to` taken off if it names `host` (the move there is off)."""
    profile = neutron.port(port_id).get(PROFILE) or {}
    if profile.get(MIGRATING_TO) == host:
        neutron.update_port(port_id, {PROFILE: {k: v for k, v in profile.items()
                                                if k != MIGRATING_TO}})


def discard(neutron: NeutronClient, uuid: str, host: str, state_dir: str | Path) -> None:
    """The move here is off: this host's bindings of the guest's ports deleted, its ledger
    removed, `migrating_to` taken off; a binding here already active (a cold move that
    failed as it defined the guest) first gives the activation back to the other host's
    (the source's, kept inactive until the guest left there). NeutronUnavailable: the
    ledger stays, a discard again finishes it."""
    ledger = ports.read_ledger(state_dir, uuid)
    if ledger is None:
        return
    alone = []
    for port_id in [*ledger["created"], *ledger["bound"]]:
        try:
            if neutron.port(port_id).get(BINDING_HOST) == host:
                others = [b["host"] for b in neutron.port_bindings(port_id)
                          if b.get("host") != host]
                if not others:
                    alone.append(port_id)
                    continue
                _activate_one(neutron, port_id, others[0])
            neutron.delete_port_binding(port_id, host)
            _forget_destination(neutron, port_id, host)
        except NotFound:
            continue
    if alone:  # the ledger stays: a destroy of the guest here releases them
        _log(uuid).error("ports %s are bound to this host alone: kept", ", ".join(alone))
        return
    ports.ledger_path(state_dir, uuid).unlink(missing_ok=True)
