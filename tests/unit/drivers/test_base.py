"""drivers/base.py: the interface every driver keeps, and what it does for all of them: a
fence powers off every running guest of ours and says which it stopped. The contract a job
run again relies on (every call finishes what a first one cut short began, or finds it done)
is checked on the fake driver and on the libvirt driver over libvirt's test driver alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.drivers.base import Driver
from etcd_compute.drivers.fake import FakeDriver
from tests.support import make_spec

RP = "00000000-0000-0000-0000-0000000000aa"


class Hypervisor(Driver):
    """The abstract methods over a dict uuid -> running; power-offs are recorded in order."""

    name = "dict"

    def __init__(self, guests: dict[str, bool], refuses: set[str] = frozenset()):
        super().__init__({"driver": {"name": "dict"}})
        self.guests, self.refuses = guests, refuses
        self.powered_off: list[str] = []

    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.guests[spec["uuid"]] = True
        return {"ip": None}

    def destroy(self, uuid: str) -> None:
        self.guests.pop(uuid, None)

    def list_instances(self) -> set[str]:
        return set(self.guests)

    def running(self) -> set[str]:
        return {uuid for uuid, up in self.guests.items() if up}

    def power_off(self, uuid: str) -> bool:
        self.powered_off.append(uuid)
        if uuid in self.refuses or not self.guests.get(uuid):
            return False  # stopped meanwhile
        self.guests[uuid] = False
        return True

    def power_on(self, uuid: str) -> bool:
        was = self.guests[uuid]
        self.guests[uuid] = True
        return not was

    # An operator's actions (what they do to a real guest: drivers/test_fake.py,
    # drivers/test_libvirt.py, tests/virt): only the power they leave the guest in.
    def stop(self, uuid: str) -> None:
        self.guests[uuid] = False

    def start(self, uuid: str) -> dict[str, Any]:
        self.guests[uuid] = True
        return {"ip": None}

    def suspend(self, uuid: str) -> None:
        self.stop(uuid)

    def resume(self, uuid: str) -> dict[str, Any]:
        return self.start(uuid)

    def pause(self, uuid: str) -> None:
        return None  # a paused guest's domain stays running

    def unpause(self, uuid: str) -> dict[str, Any]:
        return {"ip": None}

    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        return self.start(uuid)

    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        self.guests[spec["uuid"]] = power_on
        return {"ip": None}

    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        return self.rebuild(spec, power_on)

    def snapshot(self, spec: dict[str, Any], image_id: str, running: bool) -> dict[str, Any]:
        return {}

    def set_security_groups(self, spec: dict[str, Any], groups: list[str]) -> None:
        pass


def test_a_driver_must_provide_every_operation():
    class Partial(Driver):
        def build(self, spec: dict[str, Any]) -> dict[str, Any]:
            return {"ip": None}

    with pytest.raises(TypeError, match="abstract"):
        Partial({})  # type: ignore[abstract]


def test_a_fence_powers_off_every_running_guest_once_in_order():
    hypervisor = Hypervisor({"c": True, "a": True, "b": False, "d": True}, refuses={"d"})
    assert hypervisor.fence() == ["a", "c"]  # d stopped meanwhile: not counted
    assert hypervisor.powered_off == ["a", "c", "d"]  # b was not running: not asked
    assert hypervisor.guests == {"a": False, "b": False, "c": False, "d": True}
    assert hypervisor.list_instances() == {"a", "b", "c", "d"}  # definitions and disks kept


def test_a_fence_of_an_idle_host_stops_nothing():
    assert Hypervisor({"a": False}).fence() == []


def test_what_a_driver_need_not_provide():
    hypervisor = Hypervisor({})
    assert hypervisor.console("a") == ""
    assert hypervisor.check() == "dict"  # the hypervisor described, by default its name
    assert hypervisor.close() is None
    assert hypervisor.config == {"driver": {"name": "dict"}}


def test_a_driver_that_cannot_move_guests_says_so_in_one_line():
    from etcd_compute.errors import BuildError

    driver = Hypervisor({"a": True})
    for call in (lambda: driver.prepare_incoming({"uuid": "a"}),
                 lambda: driver.discard_incoming("a"),
                 lambda: driver.live_migrate("a", {}),
                 lambda: driver.send_stopped("a", {}),
                 lambda: driver.finish_incoming({"uuid": "a"}, {}, True)):
        with pytest.raises(BuildError, match="^the dict driver cannot move guests$"):
            call()
    assert driver.abort_migration("a") is False and driver.migration_progress("a") is None


# -- the contract a resumed job relies on, kept by every driver ----------------------------

# Every driver call a job can make again after a restart, a fence or a lost worker cut the
# first one short (compute/worker.py: build, destroy, an action, a reconcile's power_on, a
# move's leave and discard), met with the guest as the first one left it: (how the first left
# it, the call made again, whether the guest runs after it; None: it is gone).
NEW_SIZE = {"VCPU": 2, "MEMORY_MB": 128, "DISK_GB": 2}
RESUMED: dict[str, tuple[str, Any, bool | None]] = {
    # The build was done in the driver as etcd lost quorum; the fence stopped the guest.
    "build of a guest defined and stopped": ("stopped", lambda d, s: d.build(s), True),
    "build of a guest running": ("running", lambda d, s: d.build(s), True),
    "build asked stopped of a guest defined": (
        "stopped", lambda d, s: d.build({**s, "stopped": True}), False),
    "destroy of a guest gone": ("gone", lambda d, s: d.destroy(s["uuid"]), None),
    "destroy of a stopped guest": ("stopped", lambda d, s: d.destroy(s["uuid"]), None),
    "stop of a stopped guest": ("stopped", lambda d, s: d.stop(s["uuid"]), False),
    "start of a running guest": ("running", lambda d, s: d.start(s["uuid"]), True),
    "suspend of a suspended guest": ("suspended", lambda d, s: d.suspend(s["uuid"]), False),
    "resume of a guest resumed": ("running", lambda d, s: d.resume(s["uuid"]), True),
    "pause of a paused guest": ("paused", lambda d, s: d.pause(s["uuid"]), True),
    "unpause of a guest unpaused": ("running", lambda d, s: d.unpause(s["uuid"]), True),
    "reboot of a paused guest": ("paused", lambda d, s: d.reboot(s["uuid"], False), True),
    "soft reboot of a guest it shut down": ("stopped", lambda d, s: d.reboot(s["uuid"], False),
                                            True),
    "hard reboot of a guest it powered off": ("stopped", lambda d, s: d.reboot(s["uuid"], True),
                                              True),
    "rebuild of a guest it powered off": ("stopped", lambda d, s: d.rebuild(s, True), True),
    "rebuild of a stopped guest": ("stopped", lambda d, s: d.rebuild(s, False), False),
    "resize of a guest it powered off": (
        "stopped", lambda d, s: d.resize({**s, "resources": NEW_SIZE}, True), True),
    "resize of a stopped guest": (
        "stopped", lambda d, s: d.resize({**s, "resources": NEW_SIZE}, False), False),
    "security groups set again": (
        "running", lambda d, s: d.set_security_groups(s, ["default"]), True),
    "power on of a running guest": ("running", lambda d, s: d.power_on(s["uuid"]), True),
    "power off of a stopped guest": ("stopped", lambda d, s: d.power_off(s["uuid"]), False),
    "a move's discard of nothing made": (
        "gone", lambda d, s: d.discard_incoming(s["uuid"]), None),
}
# What each call answers besides (the same for every driver).
ANSWERS = {"power on of a running guest": False, "power off of a stopped guest": False}


@pytest.fixture(params=["fake", "libvirt"])
def any_driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    """The fake driver (the simulated hosts of the chaos tests and benchmarks) and the
    libvirt driver on libvirt's test driver: one contract for both."""
    if request.param == "fake":
        return FakeDriver(deep_merge(COMPUTE_DEFAULTS, {
            "compute": {"state_dir": str(tmp_path / "state")}, "driver": {"name": "fake"}}))
    return request.getfixturevalue("driver")  # conftest.py: test:///default, cleaned up


def left(driver: Driver, spec: dict[str, Any], how: str) -> None:
    """The guest of `spec` as a first job left it."""
    if how == "gone":
        return
    driver.build(spec)
    if how == "stopped":
        driver.stop(spec["uuid"])
    elif how == "suspended":
        driver.suspend(spec["uuid"])
    elif how == "paused":
        driver.pause(spec["uuid"])


@pytest.mark.parametrize("case", RESUMED)
def test_a_call_made_again_finishes_what_the_first_began(any_driver: Driver, image: str,
                                                        case: str) -> None:
    how, call, runs = RESUMED[case]
    spec = make_spec(RP, image)
    left(any_driver, spec, how)
    answer = call(any_driver, spec)
    if case in ANSWERS:
        assert answer is ANSWERS[case]
    else:  # the guest's address where the call starts it (None: unknown, or no network)
        assert answer is None or set(answer) == {"ip"}
    assert (spec["uuid"] in any_driver.list_instances()) is (runs is not None)
    assert (spec["uuid"] in any_driver.running()) is bool(runs)
