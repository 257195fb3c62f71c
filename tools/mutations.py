#!/usr/bin/env python3
"""Mutations the unit layer must kill: small wrong changes to the package that every unit
test once let through (issue 18). Each is applied to a copy of the tree in a temporary
directory, where the unit tests named for it run; it is killed if they fail. The same
tests must pass on the unchanged copy first, or a failure proves nothing.

    .venv/bin/python tools/mutations.py        # make mutations

A mutation whose text is no longer in its module fails the run: the code moved on, so
write the mutation again against the code as it is (and keep its killing test).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# What the tests need of the tree (the unit layer imports tools/ through tests/conftest.py;
# tests/unit/instances/test_states.py reads docs/reference/instance-states.md).
COPIED = ("etcd_compute", "tests", "tools", "pyproject.toml", "docs")


@dataclass(frozen=True)
class Mutation:
    name: str
    module: str
    original: str
    mutant: str
    killers: tuple[str, ...]  # unit tests (pytest node ids) that must fail with it


HEARTBEAT = "tests/unit/compute/test_heartbeat.py::"
MACHINE = "tests/unit/compute/test_machine.py::"
MOVES = "tests/unit/compute/test_moves.py::"
SERVICE = "tests/unit/compute/test_service.py::"
STATES = "tests/unit/instances/test_states.py::"
CLAIMS = "tests/unit/test_claims.py::"
MIGRATION = "tests/unit/virt/test_migration.py::"
LIBVIRT_MIGRATION = "tests/unit/drivers/test_libvirt_migration.py::"
CONTROLLER_MOVES = "tests/unit/controller/test_migrations.py::"
WSGI = "tests/unit/api/test_wsgi.py::"
POLICY = "tests/unit/api/test_policy.py::"
SERVER_GROUPS = "tests/unit/api/handlers/test_server_groups.py::"
SIGNED = "tests/unit/mdserver/test_signed.py::"
SERVER_NETWORKS = "tests/unit/api/handlers/test_server_networks.py::"
PLUGGING = "tests/unit/compute/test_plugging.py::"
EXTERNAL_EVENTS = "tests/unit/api/handlers/test_server_external_events.py::"
INSTANCE_EVENTS = "tests/unit/instances/test_external_events.py::"
SCHEDULER = "tests/unit/scheduler/test_scheduler.py::"
PORTS = "tests/unit/compute/test_ports.py::"
POWER = "tests/unit/compute/test_power.py::"

MUTATIONS = (
    Mutation("fence only after the lease expired", "etcd_compute/compute/heartbeat.py",
             "self.fence_after = self.timing.fence_after", "self.fence_after = self.ttl",
             (HEARTBEAT + "test_without_a_renewal_the_host_fences_at_the_fence_point_before_"
                          "the_lease_can_expire",
              HEARTBEAT + "test_the_fence_point_counts_from_the_last_renewal_that_succeeded",
              SERVICE + "test_a_heartbeat_that_cannot_renew_fences_the_host_and_a_renewal_"
                        "lifts_it")),
    Mutation("a fenced host still accepts jobs (machine.submit, the gate)",
             "etcd_compute/compute/machine.py",
             "            if self.gate.closed:\n                return  # fenced: the "
             "reconcile after the fence lifts resumes it\n", "",
             (MACHINE + "test_a_fence_between_the_builds_write_and_its_job_starts_no_job",
              MACHINE + "test_a_fence_between_an_actions_write_and_its_job_starts_no_job")),
    Mutation("the fence never wired (compute/service.py)", "etcd_compute/compute/service.py",
             "on_fence=self.fencer.fence,", "on_fence=None,",
             (SERVICE + "test_a_heartbeat_that_cannot_renew_fences_the_host_and_a_renewal_"
                        "lifts_it",)),
    Mutation("the fence never lifted (compute/service.py)", "etcd_compute/compute/service.py",
             "on_unfence=lambda: self.post(self.unfence),", "on_unfence=None,",
             (SERVICE + "test_a_heartbeat_that_cannot_renew_fences_the_host_and_a_renewal_"
                        "lifts_it",)),
    Mutation("an ERROR -> BUILDING transition added to the table",
             "etcd_compute/instances/states.py",
             "    ERROR: frozenset({ERROR, DELETING, DELETED}),",
             "    ERROR: frozenset({ERROR, DELETING, DELETED, BUILDING}),",
             (STATES + "test_every_move_is_allowed_or_refused_as_documented[ERROR-BUILDING]",)),
    # A paused guest's memory is gone with its power: the record must not stay PAUSED.
    Mutation("a PAUSED record does not follow its guest powered off",
             "etcd_compute/compute/power.py",
             "(states.SHUTOFF, True),\n                                         "
             "(states.PAUSED, False)):", "(states.SHUTOFF, True)):",
             (POWER + "test_a_paused_guest_that_stopped_shows_shutoff_its_memory_gone",)),
    Mutation("unpause allowed from ACTIVE", "etcd_compute/instances/states.py",
             "    UNPAUSE: (UNPAUSING, frozenset({PAUSED})),",
             "    UNPAUSE: (UNPAUSING, frozenset({PAUSED, ACTIVE})),",
             (STATES + "test_every_action_in_every_state_is_allowed_or_refused_naming_both",)),
    # Issue 21: a move's steps pass the one claim check (compute/moves.py).
    Mutation("a move's source takes it up without its claim check",
             "etcd_compute/compute/moves.py",
             "            reason = reason or self.claim_refusal(spec, request)\n", "",
             (MOVES + "test_the_source_refuses_a_move_whose_migration_does_not_hold_it_here",)),
    Mutation("a move's source sends the guest without checking the claims again",
             "etcd_compute/compute/moves.py",
             "                reason = self.claim_refusal(spec, request)\n",
             "                reason = None\n",
             (MOVES + "test_the_source_does_not_move_the_guest_once_the_destination_s_claim_"
                      "changed",)),
    Mutation("a move's destination makes room without its claim check",
             "etcd_compute/compute/moves.py",
             "            if self._refused_here(spec, read):\n                return\n"
             "            log.info(\"making room",
             "            log.info(\"making room",
             (MOVES + "test_a_claim_not_held_here_is_answered_as_an_error_not_made_room_for",)),
    Mutation("a claim that merely covers the spec is taken as its claim",
             "etcd_compute/claims.py",
             '    elif dict(allocations[host]["resources"]) != dict(wanted):',
             '    elif any(allocations[host]["resources"].get(rc, 0) < n for rc, n in '
             'wanted.items()):',
             (CLAIMS + "test_a_host_may_act_only_on_its_claim_alone_at_exactly_the_amounts_"
                       "asked",)),
    Mutation("a claim split with another host is taken as this host's",
             "etcd_compute/claims.py",
             "    elif not alone_on(allocations, host):\n        verdict = SPLIT\n", "",
             (CLAIMS + "test_a_host_may_act_only_on_its_claim_alone_at_exactly_the_amounts_"
                       "asked",)),
    Mutation("a host frees a claim that is not (all) on it", "etcd_compute/claims.py",
             '    if not alone_on(current.get("allocations") or {}, host):',
             '    if not current.get("allocations"):',
             (CLAIMS + "test_a_host_frees_a_claim_only_when_it_holds_all_of_it",)),
    # A hold freed before the hand-over that then failed leaves a guest Placement no longer
    # counts on its source (outside review of the test suite).
    Mutation("a move's source hold freed before its hand-over transaction",
             "etcd_compute/controller/migrations.py",
             "        if migrations.hand_over(self.store, entry, migration, source_entry, "
             "source_spec,\n                                source, there) is None:\n"
             "            return None  # something changed: the next event decides\n"
             "        try:\n"
             "            claims.release_hold(self.placement, migration[\"id\"])\n",
             "        try:\n"
             "            claims.release_hold(self.placement, migration[\"id\"])\n"
             "            if migrations.hand_over(self.store, entry, migration, source_entry,\n"
             "                                    source_spec, source, there) is None:\n"
             "                return None\n",
             (CONTROLLER_MOVES + "test_a_hand_over_that_loses_its_compare_keeps_the_source_s_"
                                 "hold",)),
    # A revert that started the source's copy while the destination still ran its own: two
    # copies of one guest on one MAC and port (a revert waited 60 s, then started anyway).
    Mutation("a revert starts the source before the destination discarded its copy",
             "etcd_compute/controller/migrations.py",
             "        if there.record is not None and not destination_dead and not destroyed:",
             "        if there.record is None and not destination_dead and not destroyed:",
             (CONTROLLER_MOVES + "test_a_revert_starts_the_source_s_copy_only_once_the_"
                                 "destination_discarded",
              "tests/unit/ops/test_lifecycle.py::test_a_reverted_move_whose_destination_never_"
              "discards_never_starts_the_source")),
    # The live move's supervisor (found in a hung CI run): libvirt 9.0's client can hold a
    # second thread's call on the migration's connection until migrateToURI3 returns.
    Mutation("the move's bound waits for libvirt to answer a look",
             "etcd_compute/virt/migration.py",
             '        answered, stats = self._ask("jobStats", self.domain.jobStats)\n'
             '        if answered:\n',
             '        answered, stats = self._ask("jobStats", self.domain.jobStats)\n'
             '        if not answered:\n            return\n        if answered:\n',
             (MIGRATION + "test_the_bound_holds_while_libvirt_holds_the_supervisor_s_calls",
              MIGRATION + "test_a_cancel_is_not_held_by_a_look_libvirt_does_not_answer")),
    Mutation("the supervisor watches on the migration's own connection",
             "etcd_compute/drivers/libvirt_migration.py",
             "with Supervisor(watched, limits,", "with Supervisor(domain, limits,",
             (LIBVIRT_MIGRATION + "test_the_move_is_watched_on_the_supervisor_s_connection_"
                                  "and_that_one_closed",)),
    # The API's request bodies (an earlier test built its body from the constant itself).
    Mutation("the body limit raised tenfold", "etcd_compute/api/wsgi.py",
             "MAX_BODY_BYTES = 114688", "MAX_BODY_BYTES = 1146880",
             (WSGI + "test_a_body_of_novas_limit_is_read_and_one_byte_more_is_413",)),
    # The policy's rules, each once let through by every test (the rule-by-rule table).
    Mutation("a reader renames a server", "etcd_compute/api/policy.py",
             '    (SERVERS % "update", PROJECT_MEMBER_OR_ADMIN),',
             '    (SERVERS % "update", PROJECT_READER_OR_ADMIN),',
             (POLICY + "test_each_rule_lets_act_whom_its_default_names"
                       "[os_compute_api:servers:update]",
              POLICY + "test_whom_the_default_refuses_is_refused_and_nothing_changes"
                       "[os_compute_api:servers:update]")),
    Mutation("a reader deletes a server group", "etcd_compute/api/policy.py",
             '    (SERVER_GROUPS % "delete", PROJECT_MEMBER_OR_ADMIN),',
             '    (SERVER_GROUPS % "delete", PROJECT_READER_OR_ADMIN),',
             (POLICY + "test_each_rule_lets_act_whom_its_default_names"
                       "[os_compute_api:os-server-groups:delete]",
              POLICY + "test_whom_the_default_refuses_is_refused_and_nothing_changes"
                       "[os_compute_api:os-server-groups:delete]")),
    Mutation("a member's rule without its project", "etcd_compute/api/policy.py",
             '("project_member_api", "role:member and project_id:%(project_id)s")',
             '("project_member_api", "role:member")',
             (POLICY + "test_each_rule_lets_act_whom_its_default_names"
                       "[os_compute_api:os-server-groups:delete]",
              POLICY + "test_another_projects_member_meets_novas_answer"
                       "[os_compute_api:os-server-tags:update]")),
    Mutation("another project's server group found by its id",
             "etcd_compute/api/handlers/server_groups.py",
             "    if group is None or (group.project_id != req.context.project_id and\n"
             "                         not req.context.is_admin):\n",
             "    if group is None:\n",
             (SERVER_GROUPS + "test_another_projects_group_is_not_found_as_one_that_does_not_"
                              "exist",)),
    Mutation("a request signed for another instance is served (metadata through Neutron)",
             "etcd_compute/mdserver/signed.py",
             "        raise Forbidden(\"X-Instance-ID-Signature is not X-Instance-ID's\")",
             "        pass",
             (SIGNED + "test_the_signature_of_another_instance_does_not_open_this_one",
              SIGNED + "test_a_signature_in_upper_case_hex_is_not_the_signature")),
    Mutation("a shared secret its group may read is taken", "etcd_compute/mdserver/signed.py",
             "if status.st_mode & 0o077:", "if status.st_mode & 0o007:",
             (SIGNED + "test_a_secret_others_may_read_or_an_empty_one_is_a_config_error"
                       "[416-abc\\n-readable by others than its owner]",)),
    # What a create may use of Neutron (the neutron backend): Nova's validate_networks.
    Mutation("a network the project does not see is taken",
             "etcd_compute/api/objects/requested_networks.py",
             "    if lost:\n        raise NetworkNotFound",
             "    if False:\n        raise NetworkNotFound",
             (SERVER_NETWORKS + "test_another_projects_network_is_not_found",)),
    Mutation("a port some server has is taken",
             "etcd_compute/api/objects/requested_networks.py",
             '    if port.get("device_id"):\n', "    if False:\n",
             (SERVER_NETWORKS + "test_a_port_in_use_is_a_conflict",)),
    Mutation("a member attaches to an external network",
             "etcd_compute/api/objects/requested_networks.py",
             'not net.get("shared") and not external_ok:', 'not net.get("shared") and False:',
             (SERVER_NETWORKS + "test_an_external_network_not_shared_is_the_admins",)),
    # Neutron's events and the network backend (issue 32).
    Mutation("a project's member hands a server an event", "etcd_compute/api/policy.py",
             '    (EXTERNAL_EVENTS, "rule:service_or_admin"),',
             '    (EXTERNAL_EVENTS, "rule:service_or_admin or role:member"),',
             (EXTERNAL_EVENTS + "test_a_member_or_reader_cannot_hand_a_server_an_event_an_"
                                "admin_can",)),
    Mutation("a flood of events kept whole", "etcd_compute/instances/external_events.py",
             '"events": (kept + events)[-MAX_EVENTS:]}', '"events": kept + events}',
             (INSTANCE_EVENTS + "test_only_the_last_events_are_kept",)),
    Mutation("an event written for an instance whose record is not there",
             "etcd_compute/instances/external_events.py",
             '[*compare, Compare(record, "version", ">", 0)]', "compare",
             (INSTANCE_EVENTS + "test_no_key_for_an_instance_whose_record_is_not_on_that_"
                                "host",)),
    Mutation("a failed port taken as plugged", "etcd_compute/compute/plugging.py",
             "        if failed and self.fatal:", "        if failed and not self.fatal:",
             (PLUGGING + "test_a_failed_port_fails_the_build_leaving_nothing",)),
    Mutation("ACTIVE before every port is plugged", "etcd_compute/compute/plugging.py",
             "        elif plugged | failed >= set(wait.ports):",
             "        elif plugged | failed:",
             (PLUGGING + "test_active_only_once_neutron_says_every_port_is_plugged",)),
    Mutation("the scheduler asks for any backend's hosts", "etcd_compute/scheduler/scheduler.py",
             "self.host_traits = frozenset({trait_of(backend_of(config))})",
             "self.host_traits = frozenset()",
             (SCHEDULER + "test_a_request_goes_only_to_a_host_of_the_schedulers_own_network_"
                          "backend[libvirt-False]",
              SCHEDULER + "test_a_request_goes_only_to_a_host_of_the_schedulers_own_network_"
                          "backend[neutron-True]")),
    Mutation("a guest's port on another project's private network (the service user's "
             "reach)", "etcd_compute/compute/ports.py",
             'return network.get("project_id") == project_id or bool(network.get("shared"))',
             "return True",
             (PORTS + "test_another_projects_network_is_not_found_and_the_ports_made_before_go",
              )),
    Mutation("another project's port bound to a guest", "etcd_compute/compute/ports.py",
             'if not port or port.get("project_id") != project_id:', "if not port:",
             (PORTS + "test_a_port_of_another_project_or_in_use_is_refused_and_left_as_it_was",
              )),
    Mutation("a release deletes another project's port naming the server",
             "etcd_compute/compute/ports.py",
             'neutron.ports(device_id=uuid,\n'
             '                                                project_id=ledger["project_id"])',
             "neutron.ports(device_id=uuid)",
             (PORTS + "test_release_deletes_what_was_made_and_a_port_made_before_a_crash_but_"
                      "not_others",)),
    Mutation("a host back from the dead deletes the ports its evacuated guest has elsewhere",
             "etcd_compute/compute/ports.py",
             "             if p.get(BINDING_HOST) in (host, \"\", None)}", "}",
             (PORTS + "test_a_release_leaves_the_servers_ports_bound_to_another_host",)),
)


def copy_tree(into: Path) -> None:
    for name in COPIED:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, into / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, into / name)


def run_tests(tree: Path, tests: list[str]) -> subprocess.CompletedProcess[str]:
    # -p no:cacheprovider: nothing written into the copy; cwd first on sys.path, so the
    # copy's package is the one imported (checked below).
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *tests], cwd=tree, capture_output=True, text=True, timeout=300)


def main() -> int:
    killers = sorted({test for mutation in MUTATIONS for test in mutation.killers})
    with tempfile.TemporaryDirectory(prefix="mutations-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        where = subprocess.run([sys.executable, "-c", "import etcd_compute; "
                                "print(etcd_compute.__file__)"], cwd=tree,
                               capture_output=True, text=True, check=True).stdout.strip()
        if not where.startswith(str(tree)):
            print(f"the copy is not what is imported ({where}): nothing can be concluded")
            return 2
        baseline = run_tests(tree, killers)
        if baseline.returncode != 0:
            print("the killing tests fail without any mutation:\n" + baseline.stdout[-3000:])
            return 1
        survivors = 0
        for mutation in MUTATIONS:
            module = tree / mutation.module
            source = module.read_text()
            if source.count(mutation.original) != 1:
                print(f"STALE   {mutation.name}: its text is not once in {mutation.module}")
                survivors += 1
                continue
            module.write_text(source.replace(mutation.original, mutation.mutant))
            started = time.monotonic()
            try:
                result = run_tests(tree, list(mutation.killers))
            finally:
                module.write_text(source)
            # "FAILED <id>" (a parametrized test named without its parameters: any of them).
            failed = [test for test in mutation.killers if f"FAILED {test}" in result.stdout]
            seconds = time.monotonic() - started
            if result.returncode != 0 and len(failed) == len(mutation.killers):
                print(f"killed  {mutation.name} ({seconds:.1f} s): "
                      f"{', '.join(test.split('::')[-1] for test in failed)}")
            else:
                survivors += 1
                print(f"SURVIVED {mutation.name} ({seconds:.1f} s): "
                      f"{len(failed)} of {len(mutation.killers)} named tests failed\n"
                      + result.stdout[-2000:])
    print(f"{len(MUTATIONS) - survivors} of {len(MUTATIONS)} mutations killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
