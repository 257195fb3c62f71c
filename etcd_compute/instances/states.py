"""An instance's states, the moves between them, and the operator's actions: rules only.

    SCHEDULED -> BUILDING -> ACTIVE <-> SHUTOFF  ...  -> DELETING -> DELETED (record expires)
        \\            |  \\-> RESCHEDULING -> SCHEDULED on an alternate host (controller)
         \\           \\-> ERROR (allocation freed, nothing left) -> DELETING/removed
          \\-> ERROR / DELETING (a bad spec, a destroy before the build started)

    ACTIVE  -stop->    STOPPING   -> SHUTOFF      SHUTOFF -start-> STARTING -> ACTIVE
    ACTIVE  -suspend-> SUSPENDING -> SUSPENDED  SUSPENDED -resume-> RESUMING -> ACTIVE
    ACTIVE  -pause->   PAUSING    -> PAUSED     PAUSED    -unpause-> UNPAUSING -> ACTIVE
    ACTIVE|PAUSED -reboot-> REBOOTING -> ACTIVE (a paused guest's reboot is hard)
    ACTIVE|SHUTOFF -rebuild-> REBUILDING -> as it was;  -resize-> RESIZING -> as it was
    ACTIVE|SHUTOFF|SUSPENDED|PAUSED -snapshot-> SNAPSHOTTING -> as it was (a running guest
        keeps running, a paused one stays paused)
    ACTIVE|SHUTOFF -security-groups-> FILTERING -> as it was
    ACTIVE|SHUTOFF -attach-interface|detach-interface-> PLUGGING -> as it was
    ACTIVE|SHUTOFF -migrate-> MIGRATING -> MIGRATED (the guest left: the controller hands
        the instance over to the destination's INCOMING record) | as it was (failed)

An operator's action (`ACTIONS`) is allowed only from the states listed for
it, and refused before anything is written otherwise; destroy is allowed
from any state. Nothing here reads or writes etcd: the transactions that move
an instance (`scheduling`, `host`, `moves`, `actions`) check their move here.
"""

from __future__ import annotations

from typing import Any

from etcd_compute.errors import EtcdComputeError

SCHEDULED = "SCHEDULED"
BUILDING = "BUILDING"
ACTIVE = "ACTIVE"
# Powered off, by an operator's stop or on its own; its disk, claim and IP are kept.
SHUTOFF = "SHUTOFF"
ERROR = "ERROR"
DELETING = "DELETING"
DELETED = "DELETED"
# The build failed here; the controller (schedule.py serve) moves it to an alternate host.
RESCHEDULING = "RESCHEDULING"
# An operator's action running on the host (the record's `task` says which).
STOPPING = "STOPPING"
STARTING = "STARTING"
# Suspended (Nova's suspend, libvirt's managed save): the guest stopped with its memory kept
# on the host's disk, restored by resume; its disk, claim and IP are kept, as SHUTOFF's. A
# state of its own, not SHUTOFF: only resume (or destroy) may follow, never start.
SUSPENDED = "SUSPENDED"
SUSPENDING = "SUSPENDING"
RESUMING = "RESUMING"
# Paused (Nova's pause, libvirt's suspend of the domain): the guest's vCPUs stopped, its
# memory kept in the host's RAM (nothing written to disk); unpause runs it on from there.
# Its own state: the domain stays active (libvirt's PAUSED), so start, stop and suspend do
# not apply; unpause, a (hard) reboot, a snapshot or destroy may follow. Its memory is lost
# with its host (a fence, a host restart): the power sync then shows it SHUTOFF, as Nova's.
PAUSED = "PAUSED"
PAUSING = "PAUSING"
UNPAUSING = "UNPAUSING"
REBOOTING = "REBOOTING"
REBUILDING = "REBUILDING"
RESIZING = "RESIZING"
# A snapshot into Glance: the guest keeps running (or stays off), the task's `from` says
# which. Its own state, as every action has one (Nova keeps vm_state and sets task_state
# image_snapshot; the compute API maps SNAPSHOTTING to vm_state `from`, that task_state):
# what one action at a time, a host's death mid-action and our own power changes rely on
# then holds for it unchanged.
SNAPSHOTTING = "SNAPSHOTTING"
# Moving to another host (docs/explanation/moves.md): on the source, the move running; the
# guest gone there (the controller hands the instance over). On the destination, the
# record the instance arrives in (made ready, then ACTIVE or SHUTOFF at the hand-over).
MIGRATING = "MIGRATING"
MIGRATED = "MIGRATED"
INCOMING = "INCOMING"
# Its security groups changing (the compute API's add/removeSecurityGroup): the host swaps
# the filter on the guest's network interface, running or not; it ends as it started.
FILTERING = "FILTERING"
# A Neutron port hot-plugged or unplugged (the compute API's os-interface): the host makes
# or binds the port and attaches it to the guest, running or not (or detaches it and
# deletes or unbinds the port); it ends as it started.
PLUGGING = "PLUGGING"

STATES = (SCHEDULED, BUILDING, ACTIVE, SHUTOFF, STOPPING, STARTING, SUSPENDED, SUSPENDING,
          RESUMING, PAUSED, PAUSING, UNPAUSING, REBOOTING, REBUILDING, RESIZING, SNAPSHOTTING,
          FILTERING, PLUGGING,
          MIGRATING, MIGRATED, INCOMING, RESCHEDULING, ERROR,
          DELETING, DELETED)
# States `schedule.py --wait` stops at (ACTIVE can still change: destroy).
FINAL = frozenset({ACTIVE, ERROR, DELETED})
# An operator's action in progress.
TRANSIENT = frozenset({STOPPING, STARTING, SUSPENDING, RESUMING, PAUSING, UNPAUSING,
                       REBOOTING, REBUILDING, RESIZING, SNAPSHOTTING, FILTERING, PLUGGING,
                       MIGRATING})
# States in which a driver may hold the instance (a cold move's source keeps its stopped
# copy until the hand-over; a destination may run the guest before it).
LIVE = frozenset({BUILDING, ACTIVE, SHUTOFF, SUSPENDED, PAUSED, DELETING, MIGRATED,
                  INCOMING}) | TRANSIENT

STOP, START, REBOOT, REBUILD, RESIZE, SNAPSHOT, MIGRATE, DESTROY = (
    "stop", "start", "reboot", "rebuild", "resize", "snapshot", "migrate", "destroy")
SUSPEND, RESUME = "suspend", "resume"
PAUSE, UNPAUSE = "pause", "unpause"
# An instance's security groups set (its spec's `security_groups`, the request's new ones).
SECURITY_GROUPS = "security-groups"
# A port plugged into the guest or unplugged (the request's `nic`).
ATTACH_INTERFACE, DETACH_INTERFACE = "attach-interface", "detach-interface"
# The destination's side of a move (a spec action, never an operator's).
INCOMING_ACTION = "incoming"
# An operator's action: the state it passes through, the states it may start from.
ACTIONS: dict[str, tuple[str, frozenset[str]]] = {
    STOP: (STOPPING, frozenset({ACTIVE})),
    START: (STARTING, frozenset({SHUTOFF})),
    SUSPEND: (SUSPENDING, frozenset({ACTIVE})),
    RESUME: (RESUMING, frozenset({SUSPENDED})),
    PAUSE: (PAUSING, frozenset({ACTIVE})),
    UNPAUSE: (UNPAUSING, frozenset({PAUSED})),
    # Nova hard-reboots a paused server (the guest powered off and started again).
    REBOOT: (REBOOTING, frozenset({ACTIVE, PAUSED})),
    REBUILD: (REBUILDING, frozenset({ACTIVE, SHUTOFF})),
    RESIZE: (RESIZING, frozenset({ACTIVE, SHUTOFF})),
    # Nova snapshots a suspended server too: its disk, copied while the guest is saved; and
    # a paused one, live (its guest stays paused).
    SNAPSHOT: (SNAPSHOTTING, frozenset({ACTIVE, SHUTOFF, SUSPENDED, PAUSED})),
    # Not SUSPENDED: the guest's saved memory keeps the definition it was saved with. Not
    # PAUSED either (unpause it first).
    SECURITY_GROUPS: (FILTERING, frozenset({ACTIVE, SHUTOFF})),
    # Nova's: active, paused or stopped; ours not paused (unpause it first: a port plugged
    # into a paused guest is not answered for); a suspended guest's saved memory keeps the
    # devices it was saved with.
    ATTACH_INTERFACE: (PLUGGING, frozenset({ACTIVE, SHUTOFF})),
    DETACH_INTERFACE: (PLUGGING, frozenset({ACTIVE, SHUTOFF})),
    # Nova moves a paused server live too; ours not (unpause it first).
    MIGRATE: (MIGRATING, frozenset({ACTIVE, SHUTOFF})),
}
# Where a successful action ends; rebuild, resize and snapshot end as they started (a move
# ends MIGRATED, TRANSITIONS below).
ENDS = {STOP: SHUTOFF, START: ACTIVE, SUSPEND: SUSPENDED, RESUME: ACTIVE, PAUSE: PAUSED,
        UNPAUSE: ACTIVE, REBOOT: ACTIVE}

# Allowed moves (docs/reference/instance-states.md has them pair by pair); None is "no record
# yet" (a spec written without one, or unreadable). From an action's state: where the
# action ends, where it started (a failure ends there), a destroy, ERROR, or SCHEDULED on
# another host (its host died mid-action).
_CUT_SHORT = frozenset({SCHEDULED, ERROR, DELETING, DELETED})
_ENDS_OF_AN_ACTION = {
    state: starts | _CUT_SHORT | ({ENDS[action]} if action in ENDS else frozenset())
    for action, (state, starts) in ACTIONS.items()}
TRANSITIONS: dict[str | None, frozenset[str]] = {
    None: frozenset({SCHEDULED, BUILDING, ERROR, DELETING, DELETED, INCOMING}),
    # -> SCHEDULED from SCHEDULED, BUILDING, ACTIVE, SHUTOFF: evacuated (its host died)
    # elsewhere. -> RESCHEDULING: its host gave it up (a failed build, a drain).
    SCHEDULED: frozenset({SCHEDULED, BUILDING, RESCHEDULING, ERROR, DELETING, DELETED}),
    # -> SHUTOFF: built powered off (an instance that was stopped, built again elsewhere).
    BUILDING: frozenset({SCHEDULED, ACTIVE, SHUTOFF, RESCHEDULING, ERROR, DELETING, DELETED}),
    # The controller moves it (SCHEDULED elsewhere), or gives up (ERROR).
    RESCHEDULING: frozenset({SCHEDULED, ERROR, DELETING, DELETED}),
    # -> SHUTOFF / ACTIVE without an action: the hypervisor saw the guest stop or start.
    ACTIVE: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, SHUTOFF, STOPPING,
                       SUSPENDING, PAUSING, REBOOTING, REBUILDING, RESIZING, SNAPSHOTTING,
                       FILTERING, PLUGGING, MIGRATING}),
    SHUTOFF: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, ACTIVE, STARTING,
                        REBUILDING, RESIZING, SNAPSHOTTING, FILTERING, PLUGGING, MIGRATING}),
    # Resumed, or evacuated (its host died: built again elsewhere, powered off, its memory
    # lost with the host), or destroyed. The hypervisor's reports do not move it.
    SUSPENDED: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, RESUMING,
                          SNAPSHOTTING}),
    # Unpaused, rebooted, snapshotted, evacuated or destroyed; -> SHUTOFF without an action:
    # the hypervisor saw the guest stop (powered off, crashed, its host restarted: its
    # memory is gone), as Nova's power sync stops a paused server found shut down.
    PAUSED: frozenset({SCHEDULED, RESCHEDULING, ERROR, DELETING, DELETED, SHUTOFF, UNPAUSING,
                       REBOOTING, SNAPSHOTTING}),
    **_ENDS_OF_AN_ACTION,
    # The guest left: MIGRATED, the controller hands the instance over.
    MIGRATING: _ENDS_OF_AN_ACTION[MIGRATING] | {MIGRATED},
    # Handed over (its record leaves with it), or its host died meanwhile; SHUTOFF: a cold
    # move whose destination could not define it (the guest stopped here, as it was sent).
    MIGRATED: frozenset({SCHEDULED, SHUTOFF, ERROR, DELETING, DELETED}),
    # The hand-over ends it as the instance was; a destroy, or its host's death.
    INCOMING: frozenset({INCOMING, ACTIVE, SHUTOFF, ERROR, DELETING, DELETED}),
    ERROR: frozenset({ERROR, DELETING, DELETED}),
    DELETING: frozenset({ERROR, DELETED}),
    # Finishing a destroy again is idempotent.
    DELETED: frozenset({DELETED}),
}


class InvalidTransition(EtcdComputeError):
    """An instance was asked to move to a state it cannot reach from where it is."""


def check_transition(current: str | None, target: str) -> None:
    if target not in TRANSITIONS[current]:
        raise InvalidTransition(f"instance cannot go from {current or 'no record'} to {target}")


class ActionRefused(EtcdComputeError):
    """An operator's action is not allowed in the instance's state (nothing was written)."""


def allowed_actions(state: str | None) -> list[str]:
    """The operator's actions allowed in `state` (destroy always)."""
    return [a for a, (_, starts) in ACTIONS.items() if state in starts] + [DESTROY]


def check_action(state: str | None, action: str, uuid: str = "") -> None:
    """ActionRefused naming the state and what is allowed in it, unless `action` is."""
    if action == DESTROY or state in ACTIONS[action][1]:
        return
    what = f"instance {uuid}" if uuid else "the instance"
    raise ActionRefused(f"{what} is {state or 'without a record'}: {action} is not allowed "
                        f"now (allowed: {', '.join(allowed_actions(state))})")


def wants_stopped(record: dict[str, Any] | None, spec: dict[str, Any]) -> bool:
    """Whether the instance should be powered off when built again (elsewhere): stopped or
    suspended (its memory is lost with its host), being stopped or suspended, or in an
    action that started from SHUTOFF; a build keeps its spec's."""
    if record is None or record["state"] in (SCHEDULED, BUILDING, RESCHEDULING):
        return bool(spec.get("stopped"))
    task = record.get("task")
    if record["state"] in TRANSIENT and task:
        return task["action"] in (STOP, SUSPEND) or \
            (task["action"] not in (START, RESUME) and task["from"] in (SHUTOFF, SUSPENDED))
    return record["state"] in (SHUTOFF, SUSPENDED)


# The one security group there is (per project): the hosts' network as it is, guests
# reaching each other and NAT out. Without it a guest's traffic is dropped both ways but
# its DHCP (virt/nwfilter.py). The anti-spoofing and the host guard are no group's.
DEFAULT_GROUP = "default"


def security_groups(spec_or_record: dict[str, Any]) -> list[str]:
    """The instance's security groups: as set (`security_groups`), else as built before
    there were any to set: `default` on the hosts' network, none without a network (a
    spec's `network` false; a record of before this field says nothing of it: default).
    The hosts' drivers read an absent field the same way (`nwfilter.guest_filter_for`)."""
    groups = spec_or_record.get("security_groups")
    if groups is not None:
        return list(groups)
    if spec_or_record.get("network") is False:
        return []
    return [DEFAULT_GROUP]
