"""controller/fencing.py: the order of the fences (libvirt first, then the agent), their
verdicts (exit status, timeout with the process group killed), the agent's placeholders,
and the helper's command line being the virt module's. Against a real libvirtd over TLS:
tests/virt/test_fencing_vm.py."""

from __future__ import annotations

import sys
import time
import uuid as uuidlib
from pathlib import Path

from etcd_compute.children import module_command
from etcd_compute.controller import fencing
from etcd_compute.controller.fencing import Attempt, Fencing, Verdict
from etcd_compute.controller.metrics import FENCES
from tests.support import wait_for

HOST, UUID = str(uuidlib.uuid4()), str(uuidlib.uuid4())


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_command_s_exit_status_is_its_verdict():
    assert fencing.run(python("pass"), 10, "command").outcome == "fenced"
    refused = fencing.run(python("import sys; print('chassis busy'); sys.exit(3)"), 10,
                          "command")
    assert (refused.outcome, refused.detail) == ("refused", "fence command exit 3: chassis busy")
    missing = fencing.run(["/nonexistent/fence_agent"], 10, "command")
    assert missing.outcome == "refused" and "No such file" in missing.detail


def test_a_command_that_hangs_is_killed_with_its_children_at_the_timeout(tmp_path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    attempt = fencing.run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], 0.2,
                          "command")
    assert attempt.outcome == "timeout" and attempt.detail == "no answer within 0.2 s"
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    wait_for(lambda: not Path(f"/proc/{child}").exists() or
             Path(f"/proc/{child}/stat").read_text().split()[2] == "Z", 5,
             what="the agent's child killed too")


def test_the_libvirt_helper_s_answer_is_read_from_its_last_line():
    done = fencing.run(python(
        "import json; print(json.dumps({'outcome': 'fenced', 'destroyed': ['a', 'b'], "
        "'reason': ''}))"), 10, "libvirt")
    assert (done.outcome, done.detail) == ("fenced", "2 guest(s) destroyed through its "
                                                     "libvirtd")
    down = fencing.run(python(
        "import json, sys; print(json.dumps({'outcome': 'unreachable', 'destroyed': [], "
        "'reason': 'Connection refused'})); sys.exit(1)"), 10, "libvirt")
    assert (down.outcome, down.detail) == ("refused", "libvirtd: Connection refused")


def test_the_helper_is_the_virt_module_with_the_controller_s_certificates():
    argv = fencing.helper_command("10.0.0.2", "/etc/ctl-pki", "hv2", [UUID], 7)
    assert argv == module_command("etcd_compute.virt.remote_fence", "--address", "10.0.0.2",
                                  "--pki-dir", "/etc/ctl-pki", "--name", "hv2",
                                  "--timeout", "7", UUID)
    from etcd_compute.virt import remote_fence  # the module it names exists and parses them

    assert remote_fence.main(argv[-9:-1] + ["not-a-uuid"]) == 2


def test_through_libvirt_runs_the_helper_and_reads_the_guests_it_destroyed():
    ran = []

    def runner(argv: list[str], timeout: float, path: str) -> Attempt:
        ran.append((argv, timeout, path))
        return fencing.run(python(
            "import json; print(json.dumps({'outcome': 'fenced', 'destroyed': ['u1'], "
            "'reason': ''}))"), timeout, path)

    attempt = fencing.through_libvirt("10.0.0.2", "/p", "hv2", [UUID], 5, runner)
    assert (attempt.outcome, attempt.destroyed) == ("fenced", ("u1",))
    assert ran == [(fencing.helper_command("10.0.0.2", "/p", "hv2", [UUID], 5), 5,
                    "libvirt")]


def test_a_helper_that_exits_0_without_its_answer_did_not_fence():
    """Exit 0 alone is a fence agent's verdict, not the libvirt helper's: its answer says."""
    silent = fencing.run(python("pass"), 10, "libvirt")
    assert silent.outcome == "refused" and silent.detail == "libvirt exit 0"
    maybe = fencing.run(python("import json; print(json.dumps({'outcome': 'maybe', "
                               "'destroyed': [], 'reason': 'hm'}))"), 10, "libvirt")
    assert maybe.outcome == "refused"


def test_the_helper_runs_from_a_directory_that_does_not_hold_the_package(tmp_path,
                                                                         monkeypatch):
    """The controller's working directory is anywhere (systemd's /, a benchmark's run
    directory): the helper was `python -m`, which found no package there."""
    monkeypatch.chdir(tmp_path)
    attempt = fencing.through_libvirt("127.0.0.1", str(tmp_path / "no-pki"), "hv2", [UUID],
                                      30)
    assert attempt.outcome == "refused" and attempt.detail.startswith("libvirtd: "), attempt
    assert "No module named" not in attempt.detail


def test_the_agent_s_arguments_get_the_host_s_name_and_address_each_on_its_own():
    template = ["fence_ipmilan", "--ip={address}", "--plug", "{name}", "{host}"]
    assert fencing.agent_command(template, HOST, "hv 2; rm -rf /", "10.0.0.2") == [
        "fence_ipmilan", "--ip=10.0.0.2", "--plug", "hv 2; rm -rf /", HOST]
    assert fencing.agent_command(["x", "{address}"], HOST, "n", None) == ["x", ""]


class Runner:
    """Records what would run; answers each path as told."""

    def __init__(self, **outcomes: str):
        self.outcomes, self.ran = outcomes, []

    def __call__(self, argv: list[str], timeout: float, path: str) -> Attempt:
        self.ran.append((path, argv, timeout))
        return Attempt(path, self.outcomes.get(path, "refused"), f"{path} said so", 0.1)


def fenced_verdict(settings: dict, runner: Runner, address: str | None = "10.0.0.2",
                   uuids: tuple[str, ...] = (UUID,)) -> Verdict:
    fences = Fencing(settings, runner=runner)
    done = []
    fences.begin(HOST, "hv2", address, list(uuids), on_done=done.append)
    wait_for(lambda: done, 10, what="the fence to end")
    verdict = fences.verdict(HOST)
    assert verdict is not None
    return verdict


SETTINGS = {"libvirt_pki_dir": "/etc/ctl-pki", "libvirt_timeout_seconds": 7,
            "command": ["fence_agent", "{name}"], "command_timeout_seconds": 30}


def test_libvirt_first_and_no_agent_when_it_fenced():
    runner = Runner(libvirt="fenced")
    verdict = fenced_verdict(SETTINGS, runner)
    assert (verdict.fenced, verdict.path) == (True, "libvirt")
    assert [(path, timeout) for path, _, timeout in runner.ran] == [("libvirt", 7.0)]
    assert verdict.how().startswith("its host fenced (libvirt said so) after")


def test_the_agent_when_libvirt_did_not_fence():
    before = FENCES.labels("command", "fenced")._value.get()
    runner = Runner(libvirt="timeout", command="fenced")
    verdict = fenced_verdict(SETTINGS, runner)
    assert (verdict.fenced, verdict.path) == (True, "command")
    assert [(path, argv) for path, argv, _ in runner.ran][1] == ("command",
                                                                 ["fence_agent", "hv2"])
    assert FENCES.labels("command", "fenced")._value.get() == before + 1


def test_neither_fenced_is_a_verdict_naming_both():
    verdict = fenced_verdict(SETTINGS, Runner())
    assert not verdict.fenced
    assert verdict.detail == "libvirt: libvirt said so; command: command said so"
    assert verdict.how().endswith("recovered after TTL + grace")


def test_without_an_address_only_the_agent_and_without_either_nothing():
    runner = Runner(command="fenced")
    assert fenced_verdict(SETTINGS, runner, address=None).path == "command"
    assert [path for path, _, _ in runner.ran] == ["command"]
    verdict = fenced_verdict({"libvirt_pki_dir": "/p"}, Runner(), address=None)
    assert (verdict.fenced, verdict.path) == (False, None)
    assert not Fencing({}).enabled and Fencing({"command": ["x"]}).enabled


def test_a_host_is_fenced_once_until_forgotten_and_a_forgotten_verdict_is_dropped():
    runner = Runner(libvirt="fenced")
    fences = Fencing(SETTINGS, runner=runner)
    done: list[str] = []
    fences.begin(HOST, "hv2", "10.0.0.2", [UUID], on_done=done.append)
    fences.begin(HOST, "hv2", "10.0.0.2", [UUID], on_done=done.append)
    wait_for(lambda: done, 10, what="the fence to end")
    assert len(runner.ran) == 1 and fences.verdict(HOST).fenced
    fences.forget(HOST)
    assert fences.verdict(HOST) is None


def test_run_reports_its_own_time():
    attempt = fencing.run(["sh", "-c", "sleep 0.15"], 10, "command")
    assert 0.1 < attempt.seconds < 10


def test_a_fence_forgotten_while_it_ran_never_decides_the_hosts_next_failure():
    """The host came back (forget) and died again (begin) while its first fence still ran:
    the first fence's verdict is of the first failure, never the second's (it fenced the
    guests of then; the host may have run others since). Only the second fence decides."""
    import threading

    first_may_end, second_may_end = threading.Event(), threading.Event()
    calls: list[int] = []

    def runner(argv: list[str], timeout: float, path: str) -> Attempt:
        calls.append(1)
        if len(calls) == 1:
            first_may_end.wait(10)
            return Attempt(path, "fenced", "the first failure's guests destroyed", 0.1)
        second_may_end.wait(10)
        return Attempt(path, "refused", "libvirtd unreachable", 0.1)

    fences = Fencing({"libvirt_pki_dir": "/p"}, runner=runner)
    done: list[str] = []
    fences.begin(HOST, "hv2", "10.0.0.2", [UUID], on_done=done.append)
    wait_for(lambda: calls, 10, what="the first fence to start")
    fences.forget(HOST)  # back
    fences.begin(HOST, "hv2", "10.0.0.2", [UUID], on_done=done.append)  # dead again
    wait_for(lambda: len(calls) == 2, 10, what="the second fence to start")
    first_may_end.set()
    wait_for(lambda: len(done) == 1, 10, what="the first fence to end")
    assert fences.verdict(HOST) is None  # the second still runs
    second_may_end.set()
    wait_for(lambda: len(done) == 2, 10, what="the second fence to end")
    assert fences.verdict(HOST).fenced is False
