"""The worker side: what runs in the pool's processes (driver calls, nothing else).

Only the main process talks to etcd (the gRPC client does not survive a
fork); workers get plain dicts in and give plain dicts back. `pool.py` is
the main process's side.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Any

from etcd_compute import network_backend
from etcd_compute.compute import port_moves, ports
from etcd_compute.drivers import Driver, load_driver
from etcd_compute.errors import EtcdComputeError, NeutronUnavailable, RequestError
from etcd_compute.glance import GlanceClient, rotate_backups
from etcd_compute.instances import states
from etcd_compute.neutron import NeutronClient

_driver: Driver | None = None
_config: dict[str, Any] = {}

# A move's jobs (compute/moves.py): the destination makes room, defines a cold move's
# guest, or throws away what it made; the source moves the guest; what a cold move left.
PREPARE, FINISH, DISCARD, MIGRATE, LEAVE = "prepare", "finish", "discard", "migrate", "leave"
MOVE_KINDS = (PREPARE, FINISH, DISCARD, MIGRATE, LEAVE)
# In a destination's target under network.backend neutron: its name, the host its ports'
# bindings are made for (the source activates them there once the guest switched over).
PORTS_HOST = "ports_host"


def init_worker(config: dict[str, Any]) -> None:
    global _driver, _config
    logging.basicConfig(
        level=config["logging"]["level"],
        format="%(asctime)s %(levelname)s %(name)s[worker] %(message)s",
    )
    _driver = load_driver(config)
    _config = config


def driver() -> Driver:
    if _driver is None:
        raise RuntimeError("worker not initialised")
    return _driver


def neutron() -> NeutronClient:
    return NeutronClient(_config["network"]["neutron"])


def build(spec: dict[str, Any]) -> dict[str, Any]:
    """The guest built; with network.backend neutron on its ports (compute/ports.py): made
    before it is defined, up before the build ends, their ids in the result (`ports`)."""
    if not network_backend.uses_neutron(_config):
        return driver().build(spec)
    settings, uuid = _config["network"]["neutron"], spec["uuid"]
    # A guest with no network (`network: false`) has no port: Neutron is not asked.
    client = None if spec.get("network") is False else neutron()
    made = [] if client is None else ports.allocate(
        client, spec, _config["compute"]["name"], _config["compute"]["state_dir"],
        settings["integration_bridge"])
    # A failure from here on is the build's: its cleanup (`destroy`) releases the ports.
    vifs = [{key: vif[key] for key in ("port_id", "mac", "mtu", "bridge")} for vif in made]
    result = driver().build({**spec, "vifs": vifs})
    ids = [vif["port_id"] for vif in made]
    if client is not None and not spec.get("stopped"):
        waited = ports.wait_until_up(client, uuid, ids, settings["vif_plugging_timeout"],
                                     settings["vif_plugging_is_fatal"])
        logging.getLogger(__name__).info("instance %s: %d port(s) up %.1f s after the "
                                         "guest started", uuid, len(ids), waited)
    ip = result.get("ip") or next((vif["ip"] for vif in made if vif["ip"]), None)
    return {**result, "ip": ip, "ports": ids}


def prefetch(spec: dict[str, Any]) -> None:
    """What a build of `spec` will need, into the driver's cache (its image), while the
    main process checks the claim: nothing of the guest. A failure is the build's to
    report (it fetches again)."""
    try:
        driver().prefetch(spec)
    except Exception as exc:  # noqa: BLE001 (only cache: the build meets it again)
        logging.getLogger(__name__).debug("prefetch for %s: %s", spec.get("uuid"), exc)


def destroy(uuid: str) -> None:
    """The guest and everything it owns; with network.backend neutron, then its ports
    (those made for it deleted, the user's own unbound)."""
    driver().destroy(uuid)
    state_dir = _config["compute"]["state_dir"]
    # Without a ledger nothing was made (a guest with no network): Neutron is not asked.
    if network_backend.uses_neutron(_config) and ports.read_ledger(state_dir, uuid):
        ports.release(neutron(), uuid, state_dir, _config["compute"]["name"])


def port_ledgers() -> set[str]:
    """Instances whose Neutron ports are not all released (network.backend neutron): a
    failed build's cleanup that met a Neutron outage leaves its ledger; the reconcile
    releases those of instances that are gone."""
    if not network_backend.uses_neutron(_config):
        return set()
    return ports.ledgered(_config["compute"]["state_dir"])


def act(spec: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    """Run the operator's action `task` (the record's task) on the instance of `spec`."""
    uuid, action = spec["uuid"], task["action"]
    if action == states.STOP:
        driver().stop(uuid)
        return {}
    if action == states.START:
        return driver().start(uuid)
    if action == states.SUSPEND:
        driver().suspend(uuid)
        return {}
    if action == states.RESUME:
        return driver().resume(uuid)
    if action == states.PAUSE:
        driver().pause(uuid)
        return {}
    if action == states.UNPAUSE:
        return driver().unpause(uuid)
    if action == states.REBOOT:
        return driver().reboot(uuid, bool(task.get("hard")))
    if action == states.SECURITY_GROUPS:
        if network_backend.uses_neutron(_config):  # the ports' groups, in Neutron
            ports.set_security_groups(neutron(), spec, task["security_groups"],
                                      _config["compute"]["state_dir"])
            return {}
        # The guest's network filter swapped, running or not (its definition too).
        driver().set_security_groups(spec, task["security_groups"])
        return {}
    if action in (states.ATTACH_INTERFACE, states.DETACH_INTERFACE):
        return _interface(spec, task, action == states.ATTACH_INTERFACE)
    # Rebuild and resize leave the guest powered as it was when the action began; a snapshot
    # of a running guest is taken live.
    power_on = task["from"] == states.ACTIVE
    if action == states.REBUILD:
        # A rebuild may give the guest new user data and a new key (its config drive).
        given = {k: task[k] for k in ("user_data", "ssh_key") if k in task}
        return driver().rebuild({**spec, "image": task.get("image") or spec.get("image"),
                                 **given}, power_on)
    if action == states.RESIZE:
        return driver().resize({**spec, "resources": task["resources"]}, power_on)
    if action == states.SNAPSHOT:
        done = driver().snapshot(spec, task["snapshot"]["image_id"], running=power_on)
        rotation = task["snapshot"].get("rotation")
        if rotation is not None:  # a backup: the oldest of its type go, once it is up
            try:
                gone = rotate_backups(GlanceClient(_config["glance"]), spec["uuid"],
                                      rotation["backup_type"], int(rotation["keep"]))
            except EtcdComputeError as exc:  # the backup stands; the next one rotates
                logging.getLogger(__name__).warning(
                    "instance %s: backup rotation failed: %s", spec["uuid"], exc)
            else:
                done = {**done, "detail": f"{done.get('detail', '')}; rotation deleted "
                                          f"{len(gone)} older backup(s)".lstrip("; ")}
        return done
    raise ValueError(f"unknown action {action!r}")


def _interface(spec: dict[str, Any], task: dict[str, Any], attach: bool) -> dict[str, Any]:
    """os-interface: a port made or bound (compute/ports.py) and plugged into the guest, a
    failed plug giving it back; or unplugged, then deleted (made for it) or unbound."""
    if not network_backend.uses_neutron(_config):
        raise RequestError("ports are hot-plugged under network.backend neutron only")
    settings, state_dir = _config["network"]["neutron"], _config["compute"]["state_dir"]
    client, uuid = neutron(), spec["uuid"]
    if not attach:
        port_id = task["nic"]["port"]
        driver().detach_interface(uuid, port_id)
        deleted = ports.detach(client, uuid, port_id, state_dir)
        return {"detail": f"port {port_id} unplugged, {'deleted' if deleted else 'unbound'}"}
    vif = ports.attach(client, spec, task["nic"], _config["compute"]["name"], state_dir,
                       settings["integration_bridge"], task.get("id"))
    try:
        driver().attach_interface(uuid, {k: vif[k] for k in ("port_id", "mac", "mtu", "bridge")})
    except BaseException:
        try:
            ports.detach(client, uuid, vif["port_id"], state_dir)
        except Exception as exc:  # noqa: BLE001 (the plug's own error is the one to tell)
            logging.getLogger(__name__).warning("instance %s: port %s not given back: %s",
                                                uuid, vif["port_id"], exc)
        raise
    if task.get("from") == states.ACTIVE:
        ports.wait_until_up(client, uuid, [vif["port_id"]], settings["vif_plugging_timeout"],
                            settings["vif_plugging_is_fatal"])
    return {"detail": f"port {vif['port_id']} plugged ({vif['ip'] or 'no address'})"}


def list_instances() -> set[str]:
    return driver().list_instances()


def running() -> set[str]:
    return driver().running()


def power_on(uuid: str) -> bool:
    return driver().power_on(uuid)


def consoles(uuids: list[str], max_bytes: int) -> dict[str, dict[str, Any]]:
    """Console tails and diagnostics of several instances in one job: {uuid: {"text",
    "diagnostics"}} (diagnostics None when the driver has none)."""
    return {uuid: {"text": driver().console(uuid, max_bytes),
                   "diagnostics": driver().diagnostics(uuid)} for uuid in uuids}


def check() -> str:
    return driver().check()


def cancel_flag(state_dir: str, uuid: str) -> Path:
    """The file whose existence cancels the instance's move in flight (the main process
    raises it; the job's driver looks for it)."""
    return Path(state_dir) / "moves" / f"cancel-{uuid}"


def move(kind: str, spec: dict[str, Any], task: dict[str, Any] | None) -> dict[str, Any]:
    """A move's step on this host (`kind` one of MOVE_KINDS); with network.backend neutron
    its ports follow the guest (compute/port_moves.py)."""
    uuid, task = spec["uuid"], task or {}
    on_ports = network_backend.uses_neutron(_config)
    name, state_dir = _config["compute"]["name"], _config["compute"]["state_dir"]
    if kind == PREPARE:
        if not on_ports:
            return driver().prepare_incoming(spec)
        client = neutron()
        port_moves.prepare(client, spec, name, state_dir)
        try:
            target = driver().prepare_incoming({**spec, "vifs": []})
        except BaseException:
            port_moves.discard(client, uuid, name, state_dir)
            raise
        return {**target, PORTS_HOST: name}
    if kind == DISCARD:
        if task.get("finished"):
            # A cold move that awaited its confirm, reverted: the guest defined here goes
            # (the source starts its own copy again).
            driver().destroy(uuid)
        driver().discard_incoming(uuid)
        if on_ports:
            port_moves.discard(neutron(), uuid, name, state_dir)
        return {}
    if kind == FINISH:
        moved = task["moved"]
        if on_ports:
            vifs = port_moves.arrive(neutron(), spec, name, state_dir,
                                     _config["network"]["neutron"]["integration_bridge"])
            macs = [str(mac).lower() for mac in moved.get("macs") or []]
            vifs.sort(key=lambda vif: macs.index(vif["mac"].lower())
                      if vif["mac"].lower() in macs else len(macs))  # the NICs' order there
            spec = {**spec, "vifs": vifs}
        return driver().finish_incoming(spec, moved, bool(moved.get("was_running")))
    if kind == LEAVE:
        driver().destroy(uuid)
        if on_ports:
            port_moves.leave(neutron(), uuid, name, state_dir)
        return {}
    if kind == MIGRATE:
        target = dict(task["target"])
        there = target.pop(PORTS_HOST, None)
        if task.get("live"):
            flag = cancel_flag(state_dir, uuid)
            # Connected before the guest crosses: the activation right after the switch-over
            # (a distributed floating IP's NAT would follow the active binding).
            client = neutron() if on_ports and there else None
            if client is not None:
                with contextlib.suppress(NeutronUnavailable):  # activate retries, logs
                    client.connect()
            figures = driver().live_migrate(uuid, target, cancelled=flag.exists)
            if client is not None:  # switched over: the ports' bindings there made active
                figures["ports_moved"] = len(port_moves.activate(client, uuid, there, name,
                                                                 state_dir))
            return {"figures": figures}
        sent = driver().send_stopped(uuid, target)
        return {"figures": {}, "moved": sent}
    raise ValueError(f"unknown move step {kind!r}")
