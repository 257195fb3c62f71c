"""A server's volume attachments (/servers/{id}/os-volume_attachments): we have no volumes
(no Cinder), so every server has none, as a Nova server without volumes has (Horizon's
instance page asks for them)."""

from __future__ import annotations

import uuid as uuidlib

from tests.unit.api.harness import Harness


def test_a_server_lists_no_volume_attachments():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    listed = harness.call("GET", f"/v2.1/servers/{uuid}/os-volume_attachments")
    assert listed.status_int == 200
    assert listed.json == {"volumeAttachments": []}


def test_no_volume_is_attached_to_a_server():
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    uuid = harness.boot()
    volume = str(uuidlib.uuid4())
    shown = harness.call("GET", f"/v2.1/servers/{uuid}/os-volume_attachments/{volume}")
    assert shown.status_int == 404
    assert shown.json["itemNotFound"]["message"] == \
        f"Instance {uuid} is not attached to volume {volume}"


def test_the_attachments_of_a_server_nobody_has_are_not_found():
    harness = Harness.new()
    missing = str(uuidlib.uuid4())
    answer = harness.call("GET", f"/v2.1/servers/{missing}/os-volume_attachments")
    assert answer.status_int == 404
    assert answer.json["itemNotFound"]["message"] == f"Instance {missing} could not be found."
