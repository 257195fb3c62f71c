"""A user clicks through Horizon, OpenStack's dashboard, on our cloud, in a real browser.

Headless Chromium (Debian's) driven by Selenium (tests/dashboard.py) against Horizon under
gunicorn with TLS (tools/local_services/horizon.py), on the compute API over Neutron
(compute_cloud.py: the OVN hypervisor hosts hv1 and hv2 with real TCG guests, the session's
Keystone and Glance, Neutron on OVN). As `demo`: Project -> Compute -> Instances, the launch
wizard (name, the offline test guest's image from Glance, flavor m1.nano, demo's network,
a key pair), the guest Active, its Log tab, its Console tab (noVNC through our console
proxy: the guest's screen on its canvas, unlike a blank one), Shut Off and Start, Hard
Reboot, Create Snapshot (an image in Glance), Delete; and reads Overview, Images, Key Pairs,
Server Groups.
As `admin`: Admin -> Compute -> Hypervisors lists the hosts; Instances, Flavors, Host
Aggregates, Defaults and Identity's projects and users are read. Throughout, Horizon's log
has no traceback and no call our API answered with an error status (each one found was a
fault of ours, fixed in the API against Nova's answer). On failure the page's screenshot,
its HTML and Horizon's log are kept under the test's directory (`evidence/`).
"""

from __future__ import annotations

import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard import (  # noqa: F401 (browser, dashboard: the fixtures)
    Browser,
    Fault,
    browser,
    confirm,
    dashboard,
    judge_log,
    row_action,
    row_text,
    wait_page,
)
from tests.network.compute_cloud import ComputeCloud
from tests.network.guests import build_test_guest, keypair
from tests.support import wait_for
from tools.local_services.glance import GlanceServer
from tools.local_services.keystone import KeystoneServer

pytestmark = pytest.mark.vm

FLAVOR = "m1.nano"


def nova_too(fault: Fault, api: str, deleted: str) -> bool:
    """A 4xx of our API's that Nova gives alike: the deleted server's 404 (the instance
    list's row polls it until it is gone)."""
    return (fault.method, fault.url, fault.status) == ("GET", f"{api}/servers/{deleted}", 404)


def server_id(cloud: ComputeCloud, name: str) -> str:
    listed = cloud.session("demo").get(f"{cloud.api.endpoint}/servers?name=^{name}$").json()
    return str(listed["servers"][0]["id"]) if listed["servers"] else ""


def launch(browser: Browser, name: str, image: str, network: str,  # noqa: F811
           key: str) -> None:
    """The launch wizard: Details, Source, Flavor, Networks, Key Pair; Launch Instance."""
    browser.click(browser.xpath("//a[normalize-space()='Launch Instance']"))
    wizard = browser.find("wizard")
    browser.find("#name", within=wizard).send_keys(name)

    def step(title: str, form: str) -> Any:
        nav = browser.find("div.wizard-nav", within=wizard)
        browser.click(browser.xpath(f".//a[normalize-space()='{title}']", within=nav))
        return browser.find(f"ng-include[ng-form={form}]", within=wizard)

    def allocated(table: Any, label: str) -> bool:
        return bool(table.find_elements("xpath", f".//tr[.//*[normalize-space()='{label}']]"
                                        "//*[contains(@class,'fa-arrow-down')]"))

    def allocate(table: Any, label: str) -> None:
        # The row of `label` in the available table: its up-arrow moves it to Allocated.
        if allocated(table, label):
            return
        browser.click(browser.xpath(
            f".//tr[.//*[normalize-space()='{label}']]//*[contains(@class,'fa-arrow-up')]",
            within=table))
        wait_for(lambda: allocated(table, label), timeout=30, interval=0.2,
                 what=f"{label} allocated")

    allocate(step("Source", "launchInstanceSourceForm"), image)
    allocate(step("Flavor", "launchInstanceFlavorForm"), FLAVOR)
    allocate(step("Networks", "launchInstanceNetworkForm"), network)
    allocate(step("Key Pair", "launchInstanceKeypairForm"), key)
    finish = browser.find("button.btn-primary.finish", within=wizard)
    wait_for(finish.is_enabled, timeout=30, interval=0.2, what="the wizard complete")
    browser.click(finish)
    wait_for(lambda: not browser.driver.find_elements("css selector", "wizard"),
             timeout=120, interval=0.5, what="the wizard closed")


# Pixels of noVNC's canvas unlike its first: 0 for a blank screen (one colour, as a blank
# canvas of its size), many once the guest's text is on it.
UNLIKE_FIRST_PIXEL = """
const canvas = document.querySelector('#screen canvas');
if (!canvas || !canvas.width || !canvas.height) return -1;
const data = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
let unlike = 0;
for (let i = 4; i < data.length; i += 4) {
  if (data[i] !== data[0] || data[i + 1] !== data[1] || data[i + 2] !== data[2]) unlike++;
}
return unlike;
"""


def console_screen(browser: Browser, png: Path) -> Path:  # noqa: F811
    """The Console tab's noVNC connected and its canvas not blank (the guest's screen
    differs from a blank canvas of its size); the canvas's screenshot saved in `png`."""
    frame = browser.find("iframe#console_embed")
    browser.driver.switch_to.frame(frame)
    try:
        status = browser.find("#status")
        wait_for(lambda: status.text.startswith("Connected"), timeout=60, interval=0.3,
                 what=f"noVNC connected (status: {status.text!r})")
        wait_for(lambda: browser.driver.execute_script(UNLIKE_FIRST_PIXEL) > 100,
                 timeout=60, interval=0.5, what="the guest's screen on noVNC's canvas")
        browser.find("#screen canvas").screenshot(str(png))
    finally:
        browser.driver.switch_to.default_content()
    return png


# The other pages of each, read (their calls judged with the rest in Horizon's log).
DEMO_PAGES = ("project/", "project/images/", "project/key_pairs/", "project/server_groups/")
ADMIN_PAGES = ("admin/instances/", "admin/flavors/", "admin/aggregates/", "admin/defaults/",
               "identity/", "identity/users/")


def visit(browser: Browser, pages: tuple[str, ...]) -> None:  # noqa: F811
    for page in pages:
        browser.get(page)
        shown = browser.driver.page_source
        assert "Something went wrong" not in shown, page
        assert "the page you were looking for does not exist" not in shown, page


def reboots(cloud: ComputeCloud, uuid: str) -> int:
    """How many reboots (soft or hard) the server's action log has."""
    listed = cloud.session("demo").get(
        f"{cloud.api.endpoint}/servers/{uuid}/os-instance-actions").json()
    return sum(1 for each in listed["instanceActions"] if each["action"] == "reboot")


def image_status(cloud: ComputeCloud, glance: GlanceServer, name: str) -> str:
    found = cloud.session("demo").get(f"{glance.endpoint}/v2/images?name={name}").json()
    return str(found["images"][0]["status"]) if found["images"] else ""


# A guest booted, stopped, started and snapshotted under TCG (each a minute or two on a
# loaded machine), after the Neutron stack, the hosts and Horizon start.
@pytest.mark.timeout(1800)
def test_a_user_runs_a_server_from_the_dashboard(
        compute_cloud: ComputeCloud, tenant: dict[str, Any], browser: Browser,  # noqa: F811
        glance_images: Any, glance_server: GlanceServer, keystone_server: KeystoneServer,
        tmp_path: Path) -> None:
    name = f"dash-{uuidlib.uuid4().hex[:6]}"
    image = f"{name}-guest"
    glance_images(build_test_guest(), image, visibility="public", architecture="x86_64",
                  hypervisor_type="qemu")
    key = keypair(tmp_path / "key")
    demo = compute_cloud.session("demo")
    demo.post(f"{compute_cloud.api.endpoint}/os-keypairs", json={"keypair": {
        "name": f"{name}-key", "public_key": Path(f"{key}.pub").read_text().strip()}})
    snapshot = f"{name}-snap"
    try:
        with browser.on_failure_saved():
            browser.login("demo", keystone_server.password("demo"))
            visit(browser, DEMO_PAGES)
            browser.get("project/instances/")
            launch(browser, name, image, tenant["name"], f"{name}-key")
            uuid = wait_for(lambda: server_id(compute_cloud, name), timeout=60, interval=1,
                            what=f"server {name} made")
            compute_cloud.made.append(("demo", uuid))
            browser.get("project/instances/")
            wait_page(browser, lambda: "Active" in row_text(browser, uuid) and
                      "Running" in row_text(browser, uuid), f"{name} Active", timeout=600)
            browser.save("instances")

            # Its console log, as the Log tab shows it.
            browser.get(f"project/instances/{uuid}/?tab=instance_details__log")
            wait_page(browser, lambda: browser.find("pre.logs").text.strip(),
                      f"{name}'s console log", timeout=180)
            browser.save("log")

            # Its Console tab: noVNC from our console proxy in an iframe, the guest's
            # screen (the boot's text) on its canvas.
            browser.get(f"project/instances/{uuid}/?tab=instance_details__console")
            screen = console_screen(browser, tmp_path / "console-canvas.png")
            browser.save("console")
            assert screen.stat().st_size > 0

            browser.get("project/instances/")
            row_action(browser, uuid, "stop")
            confirm(browser)
            wait_page(browser, lambda: "Shutoff" in row_text(browser, uuid), f"{name} Shutoff")
            row_action(browser, uuid, "start")
            browser.ready()
            wait_page(browser, lambda: "Active" in row_text(browser, uuid) and
                      "Running" in row_text(browser, uuid), f"{name} Active again")

            # Hard Reboot: a reboot in the server's action log, the server Active after it.
            # (Soft Reboot is left out: on this guest it took 38 s, waiting out a shutdown.)
            before = reboots(compute_cloud, uuid)
            browser.get("project/instances/")
            row_action(browser, uuid, "reboot")
            confirm(browser)
            wait_for(lambda: reboots(compute_cloud, uuid) > before, timeout=60,
                     interval=0.5, what=f"the hard reboot of {name} asked")
            compute_cloud.wait_status(uuid, "ACTIVE")
            browser.get("project/instances/")

            row_action(browser, uuid, "snapshot")
            form = browser.find(".modal-dialog form")
            field = browser.find("#id_name", within=form)
            field.clear()
            field.send_keys(snapshot)
            browser.click(browser.find("[type=submit]", within=form))
            browser.ready()
            wait_for(lambda: image_status(compute_cloud, glance_server, snapshot) == "active",
                     timeout=600, interval=3, what=f"snapshot {snapshot} active")

            browser.get("project/instances/")
            row_action(browser, uuid, "delete")
            confirm(browser)
            wait_for(lambda: not server_id(compute_cloud, name), timeout=300, interval=2,
                     what=f"{name} deleted")

            browser.login("admin", keystone_server.admin_password)
            browser.get("admin/hypervisors/")
            listed = browser.find("table#hypervisors").text
            assert all(host in listed for host in compute_cloud.rps), listed
            browser.save("hypervisors")
            visit(browser, ADMIN_PAGES)

            api = compute_cloud.api.endpoint
            judge_log(browser, api, lambda fault: nova_too(fault, api, uuid))
    finally:
        found = demo.get(f"{glance_server.endpoint}/v2/images?name={snapshot}").json()
        for made in found["images"]:
            demo.delete(f"{glance_server.endpoint}/v2/images/{made['id']}", raise_exc=False)
        demo.delete(f"{compute_cloud.api.endpoint}/os-keypairs/{name}-key", raise_exc=False)
