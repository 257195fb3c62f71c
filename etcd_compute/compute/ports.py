"""A guest's Neutron ports (network.backend neutron), the compute playing Nova's part: made
or taken before the guest is defined (`allocate`), waited on until Neutron says they are
up (`wait_until_up`), deleted or given back with the guest (`release`).

Runs in the pool's workers (HTTP only; etcd is the main process's). The service user
(`network.neutron.keystone`) acts for the server's project, so what the project may use
is checked here, as Neutron would check the user's own token:

- `{"uuid": net}` (`fixed_ip` optional): a new port on a network of the project's or a
  shared one; any other network is "not found", as to the user, unless the API's caller
  was shown it (`caller_sees`: an admin's server on another project's network, as Nova
  makes it with the admin's token).
- `{"port": id}`: the project's own port, free (no device) or already this server's; it
  is bound (`device_id`, `device_owner`, `binding:host_id`) with Neutron's revision check
  (`If-Match`), so two builds cannot both take it.
- a port the server has already on a network it asks for (`device_id` the server, a
  compute's, not a port the spec names): taken, and bound to this host if it was bound
  to another, so a guest rebuilt here after an evacuation keeps its ports and addresses.
- no `networks`: a port on the one network the project sees (its own and shared ones);
  none or several is a one-line error (Nova's get-me-a-network is not ours).

Every port is created with `project_id` = the server's, `device_id` = the server,
`device_owner` = `compute:nova` and `binding:host_id` = this host's name, which its
ovn-controller registers as its chassis' hostname: ML2/OVN binds the port to that chassis.

What was made is written down first, in `state_dir/ports/<uuid>.json` (the project, the
ports created, the user's ports bound): `release` deletes the ports of the server's project
naming the server as its device and bound to this host (those it made, and one made by a
build cut short before it was written down) and unbinds the user's, which are kept; a
port of the server bound to another host is that host's (an evacuation's). A build that
fails part way releases what it made before it raises, and the cleanup after a failed
build releases again (nothing left then). The ledger is gone once everything is released;
a Neutron outage during a release leaves it, and the destroy (or the next reconcile)
finishes it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from etcd_compute.errors import BuildError, NeutronError, NotFound, RequestError
from etcd_compute.neutron import NeutronClient, matching_groups

LOG = logging.getLogger("etcd_compute.compute.ports")

DEVICE_OWNER = "compute:nova"
BINDING_HOST = "binding:host_id"
POLL_SECONDS = 0.5
GROUP_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _log(uuid: str) -> logging.LoggerAdapter:
    return logging.LoggerAdapter(LOG, {"instance": uuid})


# --------------------------------------------------------------------- the ledger

def ledger_path(state_dir: str | Path, uuid: str) -> Path:
    return Path(state_dir) / "ports" / f"{uuid}.json"


def ledgered(state_dir: str | Path) -> set[str]:
    """The instances whose ports are written down here (not all released yet)."""
    return {path.stem for path in (Path(state_dir) / "ports").glob("*.json")}


def read_ledger(state_dir: str | Path, uuid: str) -> dict[str, Any] | None:
    try:
        return json.loads(ledger_path(state_dir, uuid).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise BuildError(f"ports of {uuid}: ledger unreadable ({exc})") from None


def write_ledger(state_dir: str | Path, uuid: str, ledger: dict[str, Any]) -> None:
    path = ledger_path(state_dir, uuid)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(ledger))
    os.replace(partial, path)


# --------------------------------------------------------------------- allocate

def _visible(network: dict[str, Any], project_id: str) -> bool:
    return network.get("project_id") == project_id or bool(network.get("shared"))


def _network(neutron: NeutronClient, network_id: str, project_id: str,
             caller_sees: bool = False) -> dict[str, Any]:
    """The network, if the project sees it (or the API's caller saw it: `caller_sees`)."""
    try:
        network = neutron.network(network_id)
    except NotFound:
        network = {}
    if not network or not (caller_sees or _visible(network, project_id)):
        raise RequestError(f"network {network_id} not found")
    return network


def auto_network(neutron: NeutronClient, project_id: str) -> dict[str, Any]:
    """The one network the project sees (its own and shared ones)."""
    found = {net["id"]: net for net in
             [*neutron.networks(project_id=project_id), *neutron.networks(shared=True)]}
    if len(found) != 1:
        raise RequestError(
            f"no network given and the project sees {len(found)} networks: name one "
            "(networks: [{uuid: ...}])" if found else
            "no network given and the project has none: create one, or name a shared one")
    return next(iter(found.values()))


def _security_group_ids(neutron: NeutronClient, spec: dict[str, Any]) -> list[str] | None:
    """The ids of the spec's security groups (names or ids) in the server's project; None:
    Neutron's default (the project's `default` group). Neutron's policy lets the service
    role read no project's groups (only an admin or the project), so an id not listed is
    passed on as it is: Neutron itself checks, when the port is made or changed, that the
    group is the port's project's (or shared with it), and refuses it else. The compute
    API's specs carry ids, checked with the user's token."""
    names = spec.get("security_groups")
    if not names:
        return None
    groups = neutron.security_groups(project_id=spec["project_id"])
    ids = []
    for name in names:
        match = matching_groups(groups, name)
        if not match and GROUP_ID.match(name):
            match = [name]
        if len(match) != 1:
            raise RequestError(f"security group {name!r} "
                               + ("not found" if not match else "is ambiguous: use its id"))
        ids.append(match[0])
    return ids


def set_security_groups(neutron: NeutronClient, spec: dict[str, Any], groups: list[str],
                        state_dir: str | Path) -> list[str]:
    """The guest's ports (those written down for it) put in `groups` (names or ids of the
    server's project; none: no group, nothing in or out), as Nova's security group actions
    set them on every port of the server: the ports changed."""
    ledger = read_ledger(state_dir, spec["uuid"]) or {"created": [], "bound": []}
    ids = _security_group_ids(neutron, {**spec, "security_groups": groups}) or []
    changed = []
    for port_id in [*ledger["created"], *ledger["bound"]]:
        try:
            neutron.update_port(port_id, {"security_groups": ids})
        except NotFound:
            continue  # deleted meanwhile: nothing to set
        except NeutronError as exc:
            raise _refused(exc, f"port {port_id}: security groups not set") from None
        changed.append(port_id)
    return changed


def _refused(exc: NeutronError, what: str) -> RequestError:
    """Neutron's 4xx as the request's fault, one line."""
    return RequestError(f"{what}: {exc}")


def _bind_users_port(neutron: NeutronClient, port_id: str, binding: dict[str, Any],
                     project_id: str, uuid: str) -> dict[str, Any]:
    try:
        port = neutron.port(port_id)
    except NotFound:
        port = {}
    if not port or port.get("project_id") != project_id:
        raise RequestError(f"port {port_id} not found")
    if port.get("device_id") not in ("", None, uuid):
        raise RequestError(f"port {port_id} is in use by device {port['device_id']} (409)")
    try:
        return neutron.update_port(port_id, binding, revision=port.get("revision_number"))
    except NeutronError as exc:
        raise _refused(exc, f"port {port_id} could not be bound") from None


def allocate(neutron: NeutronClient, spec: dict[str, Any], host: str, state_dir: str | Path,
             bridge: str = "br-int") -> list[dict[str, Any]]:
    """The guest's ports, in the spec's order: for each, the VIF the driver plugs (`port_id`,
    `mac`, `mtu`, `bridge`) and its first fixed `ip`. All or nothing: a refusal releases
    what was made and raises (RequestError for the request's fault, NeutronUnavailable)."""
    uuid, project_id = spec["uuid"], spec.get("project_id")
    if not project_id:
        raise RequestError("the request names no project: a Neutron port needs one")
    named = [item["port"] for item in spec.get("networks") or [] if "port" in item]
    if len(set(named)) != len(named):
        raise RequestError("a port is named twice in networks")
    # Written before anything is made in Neutron (`_one`), not before: a refusal or an
    # outage before that leaves nothing to release, and no ledger.
    ledger = read_ledger(state_dir, uuid) or {"project_id": project_id, "created": [],
                                              "bound": []}
    binding = {"device_id": uuid, "device_owner": DEVICE_OWNER, BINDING_HOST: host}
    made: list[dict[str, Any]] = []
    try:
        for item in spec.get("networks") or [None]:
            made.append(_one(neutron, item, spec, binding, ledger, state_dir, bridge,
                             {vif["port_id"] for vif in made}))
        return made
    except BaseException:
        try:
            release(neutron, uuid, state_dir, host)
        except Exception as exc:  # noqa: BLE001 (the build's own error is the one to tell)
            _log(uuid).warning("ports not released after a failed allocation: %s", exc)
        raise


def _one(neutron: NeutronClient, item: dict[str, Any] | None, spec: dict[str, Any],
         binding: dict[str, Any], ledger: dict[str, Any],
         state_dir: str | Path, bridge: str, taken: set[str]) -> dict[str, Any]:
    uuid, project_id = spec["uuid"], spec["project_id"]
    if item is not None and "port" in item:
        if item["port"] not in ledger["bound"]:  # (a build run again has it already)
            ledger["bound"].append(item["port"])
        write_ledger(state_dir, uuid, ledger)  # before it is bound: unbound if cut short
        port = _bind_users_port(neutron, item["port"], binding, project_id, uuid)
        network = neutron.network(port["network_id"])
    else:
        network = (auto_network(neutron, project_id) if item is None
                   else _network(neutron, item["uuid"], project_id,
                                 bool(item.get("caller_sees"))))
        # The server's own port on that network: made by a build here run again, or by
        # its build on a host it was evacuated from (rebound here: its address kept).
        existing = [p for p in neutron.ports(device_id=uuid, network_id=network["id"],
                                             project_id=project_id)
                    if p["id"] not in taken and p.get("device_owner") == DEVICE_OWNER and
                    (p["id"] in ledger["created"] or p["id"] not in named_ports(spec))]
        if existing:
            port = existing[0]
            if port["id"] not in ledger["created"]:
                ledger["created"].append(port["id"])
                write_ledger(state_dir, uuid, ledger)
            if port.get(BINDING_HOST) != binding[BINDING_HOST]:
                port = neutron.update_port(port["id"], {BINDING_HOST: binding[BINDING_HOST]},
                                           revision=port.get("revision_number"))
        else:
            body: dict[str, Any] = {"network_id": network["id"], "project_id": project_id,
                                    "admin_state_up": True, **binding}
            if item is not None and item.get("fixed_ip"):
                body["fixed_ips"] = [{"ip_address": item["fixed_ip"]}]
            groups = _security_group_ids(neutron, spec)
            if groups is not None:
                body["security_groups"] = groups
            write_ledger(state_dir, uuid, ledger)  # a port made but not written: found
            try:                                    # by its device at release
                port = neutron.create_port(body)
            except NeutronError as exc:
                raise _refused(exc, f"no port on network {network['id']}") from None
            ledger["created"].append(port["id"])
            write_ledger(state_dir, uuid, ledger)
    ips = [fixed["ip_address"] for fixed in port.get("fixed_ips") or []]
    _log(uuid).info("port %s on network %s (%s), bound to %s", port["id"], network["id"],
                    ", ".join(ips) or "no address", binding[BINDING_HOST])
    return {"port_id": port["id"], "mac": port["mac_address"], "mtu": network.get("mtu"),
            "bridge": binding_bridge(port, bridge), "ip": ips[0] if ips else None,
            "network_id": network["id"]}


def named_ports(spec: dict[str, Any]) -> set[str]:
    """The user's own ports the spec names."""
    return {item["port"] for item in spec.get("networks") or [] if "port" in item}


def binding_bridge(port: dict[str, Any], default: str) -> str:
    """The bridge Neutron's binding names (ML2/OVN: `binding:vif_details.bridge_name`), or
    this host's integration bridge."""
    details = port.get("binding:vif_details") or {}
    return str(details.get("bridge_name") or default)


# --------------------------------------------------------------------- hot-plug

def attach(neutron: NeutronClient, spec: dict[str, Any], nic: dict[str, str], host: str,
           state_dir: str | Path, bridge: str = "br-int",
           request_id: str | None = None) -> dict[str, Any]:
    """One more port for the guest (os-interface's attach: `nic` one item of the spec's
    networks), made or bound and written down as a build's are: its VIF. A port made on a
    network is in Neutron's default group, as Nova's attach makes it. The ports the guest
    had before the request (`request_id`) are written down with it, so the attach run
    again (a restart, a lost worker) takes the port it made then, not a second one."""
    uuid, project_id = spec["uuid"], spec.get("project_id")
    if not project_id:
        raise RequestError("the request names no project: a Neutron port needs one")
    ledger = read_ledger(state_dir, uuid) or {"project_id": project_id, "created": [],
                                              "bound": []}
    attaching = ledger.get("attaching") or {}
    if request_id is None or attaching.get("request") != request_id:
        attaching = {"request": request_id, "before": [*ledger["created"], *ledger["bound"]]}
        ledger["attaching"] = attaching
    binding = {"device_id": uuid, "device_owner": DEVICE_OWNER, BINDING_HOST: host}
    # The guest's ports are not this one (a port on a network it is on already: a new one).
    taken = set(attaching["before"]) - {nic.get("port", "")}
    return _one(neutron, nic, {**spec, "security_groups": None}, binding, ledger,
                state_dir, bridge, taken)


def detach(neutron: NeutronClient, uuid: str, port_id: str, state_dir: str | Path) -> bool:
    """A port unplugged from the guest given back (os-interface's detach): deleted if it
    was made for it, else the user's, unbound and kept; struck from the ledger. True when
    it was deleted."""
    ledger = read_ledger(state_dir, uuid) or {"created": [], "bound": []}
    made = port_id in ledger["created"]
    if made:
        neutron.delete_port(port_id)
    else:
        try:
            neutron.update_port(port_id, {"device_id": "", "device_owner": "",
                                          BINDING_HOST: ""})
        except NotFound:
            pass  # deleted meanwhile: nothing to give back
    if ledger.get("project_id"):  # (one action at a time: an attach before it has ended)
        ledger = {"project_id": ledger["project_id"],
                  "created": [p for p in ledger["created"] if p != port_id],
                  "bound": [p for p in ledger["bound"] if p != port_id]}
        write_ledger(state_dir, uuid, ledger)
    _log(uuid).info("port %s %s", port_id, "deleted" if made else "unbound (the user's)")
    return made


# --------------------------------------------------------------------- up

def wait_until_up(neutron: NeutronClient, uuid: str, port_ids: list[str], timeout: float,
                  fatal: bool, sleep: Callable[[float], None] = time.sleep,
                  now: Callable[[], float] = time.monotonic) -> float:
    """Seconds until Neutron says every port is ACTIVE (its `status`, polled: the one
    function network-vif-plugged events replace). Past `timeout`: BuildError when `fatal`,
    else a warning and the build goes on. 0 does not wait."""
    began = now()
    if timeout <= 0 or not port_ids:
        return 0.0
    down = list(port_ids)
    while True:
        try:
            down = [p for p in down if neutron.port(p).get("status") != "ACTIVE"]
        except NotFound as exc:
            raise BuildError(f"a port went away while the guest was plugged: {exc}") from None
        if not down:
            return now() - began
        if now() - began >= timeout:
            break
        sleep(POLL_SECONDS)
    why = f"port(s) {', '.join(down)} not up within {timeout:g} s (vif_plugging_timeout)"
    if fatal:
        raise BuildError(why)
    _log(uuid).warning("%s; going on (vif_plugging_is_fatal false)", why)
    return now() - began


# --------------------------------------------------------------------- release

def release(neutron: NeutronClient, uuid: str, state_dir: str | Path, host: str) -> list[str]:
    """The ports this host made for `uuid` deleted, the user's unbound (kept): the ids
    deleted. Only the server's ports bound to this host (or to none): a port of the same
    server bound elsewhere is another host's (an evacuation rebuilt it there while this
    host was down). Nothing to do without a ledger (nothing was made). NeutronUnavailable
    keeps the ledger (a retry finishes it)."""
    ledger = read_ledger(state_dir, uuid)
    if ledger is None:
        return []
    bound = set(ledger.get("bound") or [])
    found = {p["id"]: p for p in neutron.ports(device_id=uuid,
                                                project_id=ledger["project_id"])
             if p.get(BINDING_HOST) in (host, "", None)}
    deleted = []
    for port_id in sorted(set(found) - bound):
        if neutron.delete_port(port_id):
            deleted.append(port_id)
    for port_id in sorted(bound & set(found)):
        neutron.update_port(port_id, {"device_id": "", "device_owner": "", BINDING_HOST: ""})
    ledger_path(state_dir, uuid).unlink(missing_ok=True)
    if deleted or bound:
        _log(uuid).info("ports released: %d deleted, %d of the user's unbound", len(deleted),
                        len(bound & set(found)))
    return deleted
