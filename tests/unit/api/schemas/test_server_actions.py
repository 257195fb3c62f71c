"""The server actions' schemas per microversion (Nova's rebuild steps)."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import server_actions
from etcd_compute.api.wsgi import Fault


def props(version: str) -> dict:
    schema = server_actions.rebuild_schema(Version.parse(version))
    return schema["properties"]["rebuild"]["properties"]


def test_rebuild_grows_at_novas_steps():
    assert "description" not in props("2.18") and "description" in props("2.19")
    assert "key_name" not in props("2.53") and "key_name" in props("2.54")
    assert "personality" in props("2.56") and "personality" not in props("2.57")
    assert props("2.57")["user_data"]["maxLength"] == 65535
    assert "trusted_image_certificates" in props("2.63")


@pytest.mark.parametrize(("schema", "body"), [
    (server_actions.reboot, {"reboot": {"type": "soft"}}),
    (server_actions.reboot, {"reboot": {"type": "HARD"}}),
    (server_actions.resize, {"resize": {"flavorRef": 2}}),
    (server_actions.start, {"os-start": None}),
    (server_actions.confirm_resize, {"confirmResize": {}}),
    (server_actions.console_output, {"os-getConsoleOutput": {"length": "-1"}}),
    (server_actions.console_output, {"os-getConsoleOutput": {}}),
])
def test_novas_bodies_pass(schema, body):
    validation.body(schema, body)


@pytest.mark.parametrize(("schema", "body"), [
    (server_actions.reboot, {"reboot": {}}),
    (server_actions.reboot, {"reboot": {"type": "soft", "force": True}}),
    (server_actions.resize, {"resize": {"flavorRef": ""}}),
    (server_actions.stop, {"os-stop": None, "extra": 1}),
    (server_actions.console_output, {"os-getConsoleOutput": {"length": -2}}),
    (server_actions.console_output, {"os-getConsoleOutput": {"length": "1.5"}}),
])
def test_malformed_bodies_are_refused(schema, body):
    with pytest.raises(Fault) as refused:
        validation.body(schema, body)
    assert refused.value.status == 400


def test_migrate_takes_a_host_from_2_56():
    from etcd_compute.api.microversion import Version

    validation.body(server_actions.migrate_schema(Version.parse("2.55")),
                    {"migrate": {"anything": 1}})
    after = server_actions.migrate_schema(Version.parse("2.56"))
    validation.body(after, {"migrate": None})
    validation.body(after, {"migrate": {"host": "hv1"}})
    with pytest.raises(Fault):
        validation.body(after, {"migrate": {"host": "hv1", "more": 1}})
