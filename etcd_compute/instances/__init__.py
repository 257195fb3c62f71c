"""The instance model: its states, its record, the keys it owns, one transaction per transition.

Scheduler, controller, compute daemon and CLI move instances only through this
package, so what a transition writes (and what it compares first) is decided
in one place. Import the module you need; nothing is re-exported here:

    states      states, TRANSITIONS, ACTIONS and their checks, wants_stopped (no store)
    ownership   the keys an instance owns, the operations that write them, forget/remove
    records     new/moved/error records, read_record, locate, find, group members
    scheduling  what the scheduler writes: schedule, unschedule
    host        what a host writes: begin_build, activate, fail, reject, hand_over,
                mark_deleting, delete, power_changed
    moves       what the operator's side writes of another host's instance: move,
                evacuate, finish_destroy_on_dead_host (guarded by host_down)
    actions     the operator's actions: request_*, begin_action, end_action,
                refuse_action, new_request

Within the package: states at the bottom, then ownership, records, then the
transactions (scheduling | host | actions), then moves (pyproject.toml).
"""
