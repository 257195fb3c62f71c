"""The bodies of os-resetState, lock (2.73) and createBackup, as Nova's schemas take them."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.schemas import server_admin_actions as schema
from etcd_compute.api.wsgi import Fault


@pytest.mark.parametrize(("checked", "body"), [
    (schema.reset_state, {"os-resetState": {"state": "active"}}),
    (schema.reset_state, {"os-resetState": {"state": "error"}}),
    (schema.lock_v2_73, {"lock": None}),
    (schema.lock_v2_73, {"lock": {}}),
    (schema.lock_v2_73, {"lock": {"locked_reason": "r" * 255}}),
    (schema.create_backup, {"createBackup": {"name": "b", "backup_type": "daily",
                                             "rotation": 0}}),
    (schema.create_backup, {"createBackup": {"name": "b", "backup_type": "weekly",
                                             "rotation": "2", "metadata": {"k": "v"}}}),
])
def test_novas_bodies_are_taken(checked, body):
    validation.body(checked, body)


@pytest.mark.parametrize(("checked", "body"), [
    (schema.reset_state, {"os-resetState": {"state": "stopped"}}),
    (schema.reset_state, {"os-resetState": None}),
    (schema.lock_v2_73, {"lock": {"locked_reason": "r" * 256}}),
    (schema.lock_v2_73, {"lock": {"locked_reason": 3}}),
    (schema.create_backup, {"createBackup": {"name": "b", "backup_type": "daily"}}),
    (schema.create_backup, {"createBackup": {"name": "b", "backup_type": "daily",
                                             "rotation": -1}}),
    (schema.create_backup, {"createBackup": {"name": "", "backup_type": "daily",
                                             "rotation": 1}}),
])
def test_others_are_400(checked, body):
    with pytest.raises(Fault) as refused:
        validation.body(checked, body)
    assert refused.value.status == 400
