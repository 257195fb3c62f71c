"""Images through the real API and the real Glance: a server boots from a Glance image id
its project sees (another project's private image is no image), and createImage makes a
snapshot image of the server's project (the fake driver uploads its disk)."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openstack.exceptions
import pytest

from tests.api.conftest import Cloud
from tests.support import wait_for


@pytest.fixture
def raw_image(cloud: Cloud, glance_section: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    """A small raw image of project demo (private), and one of alt."""
    from etcd_compute.glance import GlanceClient

    glance = GlanceClient(glance_section)
    data = tmp_path / "disk.raw"
    data.write_bytes(b"\0" * (1 << 20))
    made = []

    def upload(project: str) -> dict[str, Any]:
        image = glance.create(f"api-test-{uuidlib.uuid4().hex[:8]}", "raw", "bare",
                              owner=cloud.project_id(project), visibility="private")
        made.append(image["id"])
        with open(data, "rb") as handle:
            glance.upload(image["id"], handle, size=data.stat().st_size)
        return glance.get(image["id"])

    upload.glance = glance  # type: ignore[attr-defined]
    yield upload
    for image_id in made:
        try:
            glance.delete(image_id)
        except Exception:  # noqa: BLE001 (gone already)
            pass


def test_a_server_boots_from_its_projects_glance_image_and_snapshots_into_glance(
        cloud: Cloud, raw_image: Any) -> None:
    demo = cloud.connect("demo")
    mine, theirs = raw_image("demo"), raw_image("alt")
    with pytest.raises(openstack.exceptions.BadRequestException,
                       match="Can not find requested image"):
        demo.compute.create_server(name="not-mine", flavor_id="1", image_id=theirs["id"],
                                   networks="auto")
    server = demo.compute.create_server(name="from-glance", flavor_id="1",
                                        image_id=mine["id"], networks="auto")
    snapshot_id = None
    try:
        server = demo.compute.wait_for_server(server, status="ACTIVE", wait=60, interval=0.5)
        assert server.image["id"] == mine["id"]
        snapshot_id = demo.compute.create_server_image(server, "api-snapshot",
                                                       metadata={"purpose": "test"},
                                                       wait=False).id
        glance = raw_image.glance
        wait_for(lambda: glance.get(snapshot_id)["status"] == "active", timeout=120,
                 interval=0.5, what="the snapshot uploaded")
        made = glance.get(snapshot_id)
        assert (made["owner"], made["image_type"], made["instance_uuid"]) == (
            cloud.project_id("demo"), "snapshot", server.id)
        assert made["base_image_ref"] == mine["id"] and made["purpose"] == "test"
        actions = [a.action for a in demo.compute.server_actions(server)]
        assert actions[0] == "createImage"
    finally:
        demo.compute.delete_server(server)
        demo.compute.wait_for_delete(server, wait=60, interval=0.5)
        if snapshot_id:
            raw_image.glance.delete(snapshot_id)
