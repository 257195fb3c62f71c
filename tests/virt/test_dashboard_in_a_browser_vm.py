"""A user clicks through Horizon, OpenStack's dashboard, on our cloud, in a real browser.

Headless Chromium (Debian's) driven by Selenium (tests/virt/dashboard.py) against Horizon
under gunicorn with TLS (tools/local_services/horizon.py), on the walk-through's cloud
(cloud_walk.py: Keystone, Glance with the offline test guest, the compute API, one libvirt
compute on a hypervisor host of its own). As `demo`: Project -> Compute -> Instances, the
launch wizard (name, the image from Glance, flavor m1.nano, a key pair), a real TCG guest
Active, its Log tab, Shut Off and Start, Create Snapshot (an image in Glance), Delete. As
`admin`: Admin -> Compute -> Hypervisors lists the host. Throughout, Horizon's log has no
traceback and no call our API answered with an error status (each one found was a fault of
ours, fixed in the API against Nova's answer). On failure the page's screenshot, its HTML and
Horizon's log are kept under the test's directory (`evidence/`).

This cloud has no Neutron in its catalog: the wizard shows no Networks step and the server
gets the host's guest network, as the API gives it. The Console tab is not offered
(CONSOLE_TYPE None) until the compute API serves a remote console.
"""

from __future__ import annotations

import json
import subprocess
import uuid as uuidlib
from pathlib import Path

import pytest

from tests.support import wait_for
from tests.virt.cloud_walk import Walk, walk  # noqa: F401 (walk: the fixture)
from tests.virt.dashboard import (  # noqa: F401 (the fixtures)
    Browser,
    api_faults,
    browser,
    dashboard,
    tracebacks,
    wait_page,
)
from tools.local_services.keystone import KeystoneServer

pytestmark = pytest.mark.vm

DEMO = "etcd-compute-demo"
FLAVOR = "m1.nano"
# Calls of Horizon's answered 4xx that Nova answers alike, each with its reason.
NOVA_TOO: dict[tuple[str, str], str] = {}


def server_id(walk: Walk, name: str) -> str:  # noqa: F811
    listed = json.loads(walk.osc(DEMO, "server", "list", "--name", f"^{name}$",
                                 "-f", "json").stdout)
    return str(listed[0]["ID"]) if listed else ""


def row_status(browser: Browser, uuid: str) -> str:  # noqa: F811
    rows = browser.driver.find_elements("css selector", f"tr[data-object-id='{uuid}']")
    return rows[0].text if rows else ""


def row_action(browser: Browser, uuid: str, action: str) -> None:  # noqa: F811
    """Click the row's `action` (a table action of Horizon's: stop, start, snapshot,
    delete), in its menu or as its button; confirm it where Horizon asks."""
    row = browser.find(f"tr[data-object-id='{uuid}']")
    element = row.find_element("css selector", f"[id$='__action_{action}']")
    browser.click(element)


def confirm(browser: Browser) -> None:  # noqa: F811
    browser.click(browser.find(".modal-dialog .modal-footer .btn-danger, "
                               ".modal-dialog .modal-footer .btn-primary"))
    browser.ready()


def launch(browser: Browser, name: str, image: str, key: str) -> None:  # noqa: F811
    """The Angular launch wizard: Details, Source, Flavor, Key Pair; Launch Instance."""
    browser.click(browser.xpath("//a[normalize-space()='Launch Instance']"))
    wizard = browser.find("wizard")
    browser.find("#name", within=wizard).send_keys(name)

    def step(title: str, form: str) -> object:
        nav = browser.find("div.wizard-nav", within=wizard)
        browser.click(browser.xpath(f".//a[normalize-space()='{title}']", within=nav))
        return browser.find(f"ng-include[ng-form={form}]", within=wizard)

    def allocate(table: object, label: str) -> None:
        # The row of `label` in the available table; its up-arrow moves it to Allocated.
        browser.click(browser.xpath(
            f".//tr[.//*[normalize-space()='{label}']]//*[contains(@class,'fa-arrow-up')]",
            within=table))
        browser.xpath(f".//tr[.//*[normalize-space()='{label}']]"
                      "//*[contains(@class,'fa-arrow-down')]", within=table)

    allocate(step("Source", "launchInstanceSourceForm"), image)
    allocate(step("Flavor", "launchInstanceFlavorForm"), FLAVOR)
    keys = step("Key Pair", "launchInstanceKeypairForm")
    if not keys.find_elements("xpath", f".//tr[.//*[normalize-space()='{key}']]"
                              "//*[contains(@class,'fa-arrow-down')]"):
        allocate(keys, key)
    finish = browser.find("button.btn-primary.finish", within=wizard)
    wait_for(finish.is_enabled, timeout=30, interval=0.2, what="the wizard complete")
    browser.click(finish)
    wait_for(lambda: not browser.driver.find_elements("css selector", "wizard"),
             timeout=120, interval=0.5, what="the wizard closed")


# A guest booted, stopped, started and snapshotted under TCG (each a minute or two on a
# loaded machine), after the walk-through's fixtures and Horizon start.
@pytest.mark.timeout(1500)
def test_a_user_runs_a_server_from_the_dashboard(
        walk: Walk, browser: Browser, keystone_server: KeystoneServer,  # noqa: F811
        tmp_path: Path) -> None:
    name = f"dash-{uuidlib.uuid4().hex[:6]}"
    snapshot = f"{name}-snap"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f",
                    str(tmp_path / "key")], check=True)
    walk.osc(DEMO, "keypair", "create", "--public-key", str(tmp_path / "key.pub"),
             f"{name}-key")
    uuid = ""
    try:
        with browser.on_failure_saved():
            browser.login("demo", keystone_server.password("demo"))
            browser.get("project/instances/")
            launch(browser, name, walk.image, f"{name}-key")
            uuid = wait_for(lambda: server_id(walk, name), timeout=60, interval=1,
                            what=f"server {name} made")
            browser.get("project/instances/")
            wait_page(browser, lambda: "Active" in row_status(browser, uuid) and
                      "Running" in row_status(browser, uuid), f"{name} Active", timeout=600)
            browser.save("instances")

            # Its console log, as the Log tab shows it.
            browser.get(f"project/instances/{uuid}/?tab=instance_details__log")
            wait_page(browser, lambda: browser.find("pre.logs").text.strip(),
                      f"{name}'s console log", timeout=180)

            browser.get("project/instances/")
            row_action(browser, uuid, "stop")
            confirm(browser)
            wait_page(browser, lambda: "Shutoff" in row_status(browser, uuid),
                      f"{name} Shutoff")
            row_action(browser, uuid, "start")
            browser.ready()
            wait_page(browser, lambda: "Active" in row_status(browser, uuid) and
                      "Running" in row_status(browser, uuid), f"{name} Active again")

            row_action(browser, uuid, "snapshot")
            form = browser.find(".modal-dialog form")
            field = browser.find("#id_name", within=form)
            field.clear()
            field.send_keys(snapshot)
            browser.click(browser.find("[type=submit]", within=form))
            browser.ready()
            wait_for(lambda: walk.osc(DEMO, "image", "show", snapshot, "-f", "value", "-c",
                                      "status", ok=False).stdout.strip() == "active",
                     timeout=600, interval=3, what=f"snapshot {snapshot} active")

            browser.get("project/instances/")
            row_action(browser, uuid, "delete")
            confirm(browser)
            wait_for(lambda: not server_id(walk, name), timeout=300, interval=2,
                     what=f"{name} deleted")
            uuid = ""

            browser.login("admin", keystone_server.admin_password)
            browser.get("admin/hypervisors/")
            hypervisors = browser.find("table#hypervisors").text
            assert walk.host_name in hypervisors, hypervisors

            log = browser.dashboard.log_path.read_text(errors="replace")
            faults = [fault for fault in api_faults(log)
                      if (fault.method, fault.url.split("?")[0]) not in NOVA_TOO]
            assert not faults, "answers Nova would not give:\n" + "\n".join(map(str, faults))
            assert not tracebacks(log), "\n\n".join(tracebacks(log))
    finally:
        if uuid:
            walk.osc(DEMO, "server", "delete", "--wait", uuid, ok=False)
        walk.osc(DEMO, "image", "delete", snapshot, ok=False)
        walk.osc(DEMO, "keypair", "delete", f"{name}-key", ok=False)
