"""What a fake guest shows: its diagnostics follow its state, its console names it."""

from __future__ import annotations

import pytest

from etcd_compute.drivers.fake_guest import boot_log, fake_diagnostics


@pytest.mark.parametrize(("instance", "state"), [
    ({}, "running"), ({"running": True, "paused": False}, "running"),
    ({"running": True, "paused": True}, "paused"), ({"running": False}, "shutdown"),
    # Powered off, it is paused no more, whatever the flag says.
    ({"running": False, "paused": True}, "shutdown")])
def test_diagnostics_say_running_paused_or_shut_down(instance, state):
    assert fake_diagnostics(instance)["state"] == state


def test_diagnostics_show_the_size_in_novas_shape():
    shown = fake_diagnostics({"resources": {"VCPU": 2, "MEMORY_MB": 256}, "network": False})
    assert (shown["num_cpus"], shown["memory_details"]["maximum"], shown["num_nics"]) == \
        (2, 256, 0)
    assert [cpu["id"] for cpu in shown["cpu_details"]] == [0, 1]


def test_the_console_is_a_boot_log_of_several_lines_ending_with_the_instance():
    lines = boot_log("u-1").splitlines()
    assert len(lines) > 3 and lines[-1] == "fake console of u-1: booted"
