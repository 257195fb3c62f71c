"""compute/parts.py: the instance machine gives its parts (actions, ends) all that the
Protocol says they may use, with the signatures they call."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path

from etcd_compute.compute.machine import InstanceMachine
from etcd_compute.compute.parts import Machine
from tests.unit.compute.test_machine import Host


def protocol_members() -> tuple[set[str], set[str]]:
    attributes = set(typing.get_type_hints(Machine))
    methods = {name for name, value in vars(Machine).items()
               if inspect.isfunction(value) and not name.startswith("_")}
    return attributes, methods


def test_the_machine_has_every_attribute_and_method_its_parts_use(tmp_path: Path):
    attributes, methods = protocol_members()
    assert {"store", "jobs", "consoles"} <= attributes and {"read", "submit"} <= methods
    machine = Host(tmp_path).machine
    assert all(hasattr(machine, name) for name in attributes)
    for name in methods:
        wanted = inspect.signature(getattr(Machine, name))
        given = inspect.signature(getattr(InstanceMachine, name))
        for parameter in wanted.parameters.values():
            assert parameter.name in given.parameters, (name, parameter.name)
            assert given.parameters[parameter.name].kind in (
                parameter.kind, inspect.Parameter.POSITIONAL_OR_KEYWORD), (name, parameter)
