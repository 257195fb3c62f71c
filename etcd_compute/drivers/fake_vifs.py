"""The fake driver's NICs on Neutron ports (`driver.fake.ovsdb`): each port an Open vSwitch
internal port on the host's integration bridge, as libvirt plugs a guest's tap.

A fake guest has no tap, but Neutron on OVN sets a port ACTIVE only once some chassis'
ovn-controller claims it, which it does for an interface on its `br-int` whose
`external_ids:iface-id` is the port. So the fake driver adds what libvirt would add for a
`<virtualport type='openvswitch'>` NIC (virt/vif.py), through `ovs-vsctl
--db=<driver.fake.ovsdb>`, with the external ids libvirt sets (`iface-id`, `attached-mac`,
`iface-status=active`, `vm-uuid`), as an internal port (a device of the switch's own,
standing in for the tap). Neutron then sets the port ACTIVE and sends its real
`network-vif-plugged`. A destroy removes every interface whose `vm-uuid` is the guest's,
so it needs nothing but the uuid, and is idempotent.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from etcd_compute.errors import BuildError
from etcd_compute.virt.vif import Vif

TIMEOUT = 30  # seconds ovs-vsctl waits for ovsdb-server and ovs-vswitchd


def _vsctl(ovsdb: str, *args: str) -> str:
    argv = ["ovs-vsctl", f"--db={ovsdb}", f"--timeout={TIMEOUT}", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT + 10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"fake driver: ovs-vsctl at {ovsdb}: {exc}") from None
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        raise BuildError(f"fake driver: ovs-vsctl at {ovsdb}: {why[0]}")
    return done.stdout


def plug_commands(uuid: str, vifs: Sequence[Vif]) -> list[str]:
    """One ovs-vsctl transaction's arguments: every NIC of the guest on its bridge."""
    args: list[str] = []
    for vif in vifs:
        args += ["--", "--may-exist", "add-port", vif.bridge, vif.device,
                 "--", "set", "Interface", vif.device, "type=internal", f'mac="{vif.mac}"',
                 f"external_ids:iface-id={vif.port_id}",
                 f'external_ids:attached-mac="{vif.mac}"',
                 "external_ids:iface-status=active", f"external_ids:vm-uuid={uuid}"]
        if vif.mtu is not None:
            args.append(f"mtu_request={vif.mtu}")
    return args


def plug(ovsdb: str | None, uuid: str, vifs: Sequence[dict[str, Any]]) -> None:
    """The guest's NICs (`spec["vifs"]`, as compute/ports.py made them) on their bridges;
    no `ovsdb` (the setting null): nothing plugged."""
    checked = [Vif.from_dict(vif) for vif in vifs]
    if ovsdb and checked:
        _vsctl(ovsdb, *plug_commands(uuid, checked))


def plugged(ovsdb: str, uuid: str) -> list[str]:
    """The devices plugged for the guest `uuid` (its `vm-uuid`)."""
    out = _vsctl(ovsdb, "--bare", "--columns=name", "find", "Interface",
                 f"external_ids:vm-uuid={uuid}")
    return sorted(line.strip() for line in out.splitlines() if line.strip())


def unplug(ovsdb: str | None, uuid: str) -> None:
    """Every interface of the guest `uuid` off its bridge (none, or no `ovsdb`: nothing)."""
    if not ovsdb:
        return
    args: list[str] = []
    for device in plugged(ovsdb, uuid):
        args += ["--", "--if-exists", "del-port", device]
    if args:
        _vsctl(ovsdb, *args)
