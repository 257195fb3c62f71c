"""drivers/base.py: the interface every driver keeps, and what it does for all of them: a
fence powers off every running guest of ours and says which it stopped."""

from __future__ import annotations

from typing import Any

import pytest

from etcd_compute.drivers.base import Driver


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
