"""What every server action checks first: Nova's state messages, the lock, and how the
instance's path's refusals are answered."""

from __future__ import annotations

import pytest

from etcd_compute.api.handlers import action_checks
from etcd_compute.api.objects.quotas import OverQuota
from etcd_compute.api.objects.servers import Server
from etcd_compute.api.wsgi import Fault
from etcd_compute.errors import UsageError
from etcd_compute.instances.states import ActionRefused
from etcd_compute.ops.lifecycle import NoRoom

UUID = "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d"


def server(state: str = "ACTIVE", **doc) -> Server:
    return Server({"uuid": UUID, "project_id": "p1", "user_id": "u1", "name": "web",
                   "created_at": 1.0, "updated_at": 1.0, **doc}, 1,
                  record={"uuid": UUID, "state": state, "updated_at": 1.0}, host="hv")


def test_check_state_names_the_vm_state_then_the_task_state():
    action_checks.check_state(server(), "stop", {"active"})
    with pytest.raises(Fault) as refused:
        action_checks.check_state(server("SHUTOFF"), "stop", {"active"})
    assert (refused.value.status, refused.value.message) == (
        409, f"Cannot 'stop' instance {UUID} while it is in vm_state stopped")
    with pytest.raises(Fault) as refused:
        action_checks.check_state(server("STOPPING"), "reboot", {"active"})
    assert "while it is in task_state powering-off" in refused.value.message


def test_a_reset_state_is_the_vm_state_checked():
    reset = {"vm_state": "error", "state": "ACTIVE", "request_id": None, "at": 2.0}
    action_checks.check_state(server(reset=reset), "rebuild", {"error"})
    with pytest.raises(Fault):
        action_checks.check_state(server(reset=reset), "resize", {"active"})


@pytest.mark.parametrize(("raised", "status"), [
    (ActionRefused("pending"), 409), (NoRoom("full"), 409), (OverQuota("cores"), 403),
    (UsageError("bad"), 400)])
def test_the_paths_refusals_are_novas_codes(raised, status):
    def call():
        raise raised

    with pytest.raises(Fault) as answered:
        action_checks.asked(call)
    assert answered.value.status == status and str(raised) in answered.value.message
