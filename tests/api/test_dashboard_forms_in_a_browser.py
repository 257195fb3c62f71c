"""Horizon's forms, clicked in a real browser, on a fake-driver cloud: what needs no real
guest (the guest's own behaviour is not the subject: tests/network/
test_dashboard_in_a_browser_vm.py boots one), so the real-guest test does not grow.

Headless Chromium through Selenium (tests/dashboard.py) against Horizon under gunicorn with
TLS (tools/local_services/horizon.py), on this module's compute API (tests/api/conftest.py:
one fake-driver host, no Neutron in the catalog) and the session's Keystone and Glance.
As `demo`: Images (Create Image: a file uploaded through Horizon into Glance), Key Pairs
(Create Key Pair, Import Public Key), Server Groups (Create Server Group), and on a server
of its own: Lock and Unlock, Soft Reboot, Resize then Revert, Resize then Confirm.
As `admin`: Flavors (Create Flavor private to demo, then Modify Access), Defaults (Update
Default Quotas), Identity (Create Project, Create User, the project's Modify Quotas), Host
Aggregates (Create Host Aggregate with the host in it). Each result is read back through the
API; Horizon's log after each test has no traceback and no answer of our API's that Nova
would not give. On failure the page's screenshot, its HTML and Horizon's log are kept under
the test's directory (`evidence/`).
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.api.conftest import Cloud
from tests.dashboard import (  # noqa: F401 (browser, dashboard: the fixtures)
    Browser,
    browser,
    confirm,
    dashboard,
    judge_log,
    row_action,
    row_text,
    wait_page,
)
from tests.support import wait_for

WAIT = 60
# Chromium cancels a page's requests when the machine's addresses change
# (net::ERR_NETWORK_CHANGED, as other tests make network namespaces and bridges): a form
# that did not load, or a policy check lost, then fails a step. One more try.
pytestmark = pytest.mark.flaky(reruns=1)


def submit(browser: Browser, form: Any = None) -> None:  # noqa: F811
    """The open modal's primary button clicked, the modal gone, no error shown."""
    form = form or browser.find(".modal-dialog")
    browser.click(browser.find(".modal-footer .btn-primary, button.btn-primary.finish",
                               within=form))
    wait_for(lambda: not browser.driver.execute_script(
        "return [...document.querySelectorAll('.modal-dialog')]"
        ".some(each => each.offsetParent !== null);"),
        timeout=WAIT, interval=0.3, what="the form closed")
    browser.ready()
    shown_errors(browser)


def shown_errors(browser: Browser) -> None:  # noqa: F811
    errors = [each.text for each in browser.driver.find_elements(
        "css selector", ".alert-danger, .alert-error") if each.is_displayed()]
    assert not errors, errors


def fill(browser: Browser, fields: dict[str, Any], within: Any = None) -> None:  # noqa: F811
    for css, value in fields.items():
        field = browser.find(css, within=within)
        field.clear()
        field.send_keys(str(value))


def tab(browser: Browser, title: str) -> None:  # noqa: F811
    """A tab of the open modal workflow, by its title."""
    browser.click(browser.xpath(f"//div[contains(@class,'modal-dialog')]//ul[contains("
                                f"@class,'nav')]//a[normalize-space()='{title}']"))


def add_member(browser: Browser, step: str, name: str) -> None:  # noqa: F811
    """In the open workflow's membership step `step` (Horizon's horizon.membership), the
    available member shown as `name` moved to the step's members."""
    def added() -> bool:
        return bool(browser.driver.execute_script("""
            const [step, name] = arguments;
            for (const item of document.querySelectorAll(
                     `.available_${step} li[data-${step}-id]`)) {
              if (item.textContent.trim() !== name) continue;
              const button = item.parentElement.querySelector("a[href='#add_remove']");
              if (button) { button.click(); return true; }
            }
            return false;""", step, name))

    # (The modal's form is drawn after it opens.)
    wait_for(added, timeout=WAIT, interval=0.3, what=f"{name} offered in {step}")
    wait_for(lambda: browser.driver.execute_script("""
        const [step, name] = arguments;
        return [...document.querySelectorAll(`.${step}_members li[data-${step}-id]`)]
            .some(item => item.textContent.trim() === name);""", step, name),
        timeout=WAIT, interval=0.2, what=f"{name} in {step}'s members")


def link(browser: Browser, text: str) -> None:  # noqa: F811
    """The page's link or button `text`, clicked. The page is loaded again if it does not
    show: Chromium cancels a page's requests when the machine's addresses change
    (net::ERR_NETWORK_CHANGED: other tests' network namespaces and bridges), and a panel
    whose policy check was cancelled shows no actions."""
    path = f"//a[normalize-space()='{text}'] | //button[normalize-space()='{text}']"
    for _ in range(3):
        with contextlib.suppress(AssertionError):
            browser.click(browser.xpath(path, timeout=20))
            return
        browser.driver.refresh()
        browser.ready()
    browser.click(browser.xpath(path))


def table_row_action(browser: Browser, table: str, name: str,  # noqa: F811
                     action: str) -> None:
    """The `action` of the row shown as `name` in Horizon's (Django) table `table`."""
    row = browser.find(f"table#{table} tr[data-display='{name}']")
    browser.click(row.find_element("css selector", f"[id$='__action_{action}']"))


def public_key() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode()


def server(cloud: Cloud, uuid: str) -> dict[str, Any]:
    return cloud.session("demo").get(
        f"{cloud.api.endpoint}/servers/{uuid}",
        headers={"OpenStack-API-Version": "compute 2.47"}).json()["server"]


def settled(cloud: Cloud, uuid: str, status: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        now = server(cloud, uuid)
        return now if now["status"] == status and not now["OS-EXT-STS:task_state"] else None
    return wait_for(done, timeout=WAIT, interval=0.3, what=f"{uuid} {status}")


def choose(browser: Browser, css: str, label: str, within: Any = None) -> None:  # noqa: F811
    """The option shown as `label` chosen in the select `css` (shown, or hidden behind
    Horizon's themed drop-down), as a user's choice is seen by the page's scripts."""
    from selenium.common.exceptions import StaleElementReferenceException

    def chosen() -> bool:
        with contextlib.suppress(StaleElementReferenceException):  # the form drawn again
            return try_choosing()
        return False

    def try_choosing() -> bool:
        found = (within or browser.driver).find_elements("css selector", css)
        return bool(found) and bool(browser.driver.execute_script("""
            const [select, label] = arguments;
            for (const option of select.options) {
              if (option.text.trim() === label || option.label.trim() === label) {
                select.value = option.value;
                select.dispatchEvent(new Event('change', {bubbles: true}));
                return true;
              }
            }
            return false;""", found[0], label))

    # (Some lists are filled after the form shows.)
    wait_for(chosen, timeout=WAIT, interval=0.3, what=f"{label} among {css}'s options")


def resize(browser: Browser, uuid: str, flavor: str) -> None:  # noqa: F811
    browser.get("project/instances/")
    row_action(browser, uuid, "resize")
    choose(browser, ".modal-dialog #id_flavor", flavor)
    submit(browser)


def test_a_member_makes_keys_groups_images_and_acts_on_a_server(
        cloud: Cloud, browser: Browser, tmp_path: Path) -> None:  # noqa: F811
    demo = cloud.session("demo")
    api = cloud.api.endpoint
    name = f"dash-{uuidlib.uuid4().hex[:6]}"
    image_file = tmp_path / "disk.raw"
    image_file.write_bytes(b"\0" * (1 << 20))
    uuid = ""
    image_ids: list[str] = []
    try:
        with browser.on_failure_saved():
            browser.login("demo", cloud.keystone.password("demo"))

            # Images: Create Image, the file uploaded through Horizon (legacy mode) to Glance.
            browser.get("project/images/")
            link(browser, "Create Image")
            wizard = browser.find("wizard")
            fill(browser, {"#imageForm-name": f"{name}-image"}, within=wizard)
            wizard.find_element("css selector", "input[name='image_file']").send_keys(
                str(image_file))
            choose(browser, "#imageForm-format", "Raw", within=wizard)
            submit(browser, wizard)
            image = wait_for(lambda: _image(cloud, f"{name}-image", "active"), timeout=WAIT,
                             interval=1, what=f"{name}-image active in Glance")
            image_ids.append(image["id"])
            assert image["size"] == 1 << 20

            # Key Pairs: Create Key Pair (made by the API), Import Public Key.
            browser.get("project/key_pairs/")
            link(browser, "Create Key Pair")
            fill(browser, {"#id_name": f"{name}-made"})
            submit(browser)
            browser.get("project/key_pairs/")
            link(browser, "Import Public Key")
            key = public_key()
            fill(browser, {"#id_name": f"{name}-imported", "#id_public_key": key})
            submit(browser)
            keys = {each["keypair"]["name"]: each["keypair"] for each in
                    demo.get(f"{api}/os-keypairs").json()["keypairs"]}
            assert keys[f"{name}-imported"]["public_key"] == key
            assert keys[f"{name}-made"]["public_key"].startswith("ssh-")

            # Server Groups: Create Server Group.
            browser.get("project/server_groups/")
            link(browser, "Create Server Group")
            modal = browser.find(".modal-dialog")
            fill(browser, {"input[name='name']": f"{name}-group"}, within=modal)
            choose(browser, "select[name='policy']", "Anti Affinity", within=modal)
            submit(browser, modal)
            # (The modal closes before its request is answered.)
            group = wait_for(lambda: next((each for each in demo.get(
                f"{api}/os-server-groups").json()["server_groups"]
                if each["name"] == f"{name}-group"), None), timeout=WAIT, interval=0.5,
                what=f"{name}-group made")
            assert group["policies"] == ["anti-affinity"]

            # A server of demo's (made through the API: without Neutron Horizon's launch
            # wizard cannot send a network), from the image uploaded above.
            made = demo.post(f"{api}/servers", json={"server": {
                "name": name, "flavorRef": "1", "imageRef": image["id"],
                "networks": "auto"}}, headers={"OpenStack-API-Version": "compute 2.47"})
            uuid = made.json()["server"]["id"]
            settled(cloud, uuid, "ACTIVE")
            browser.get("project/instances/")
            wait_page(browser, lambda: "Active" in row_text(browser, uuid), f"{name} Active",
                      timeout=WAIT)

            # Lock, Unlock.
            row_action(browser, uuid, "lock")
            browser.ready()
            wait_for(lambda: server(cloud, uuid)["locked"], timeout=WAIT, interval=0.3,
                     what=f"{name} locked")
            browser.get("project/instances/")
            row_action(browser, uuid, "unlock")
            browser.ready()
            wait_for(lambda: not server(cloud, uuid)["locked"], timeout=WAIT, interval=0.3,
                     what=f"{name} unlocked")

            # Soft Reboot: a reboot in the action log, Active after.
            browser.get("project/instances/")
            row_action(browser, uuid, "soft_reboot")
            confirm(browser)
            wait_for(lambda: _actions(cloud, uuid).count("reboot") == 1, timeout=WAIT,
                     interval=0.3, what=f"the soft reboot of {name}")
            settled(cloud, uuid, "ACTIVE")

            # Resize to m1.small, Revert: m1.tiny again. Resize again, Confirm: m1.small.
            resize(browser, uuid, "m1.small")
            assert settled(cloud, uuid, "VERIFY_RESIZE")["flavor"]["original_name"] == \
                "m1.small"
            browser.get("project/instances/")
            row_action(browser, uuid, "revert")
            browser.ready()
            assert settled(cloud, uuid, "ACTIVE")["flavor"]["original_name"] == "m1.tiny"
            resize(browser, uuid, "m1.small")
            settled(cloud, uuid, "VERIFY_RESIZE")
            browser.get("project/instances/")
            row_action(browser, uuid, "confirm")
            browser.ready()
            assert settled(cloud, uuid, "ACTIVE")["flavor"]["original_name"] == "m1.small"
            browser.get("project/instances/")
            browser.save("instances")
            judge_log(browser, api)
    finally:
        if uuid:
            demo.delete(f"{api}/servers/{uuid}", raise_exc=False)
            wait_for(lambda: demo.get(f"{api}/servers/{uuid}", raise_exc=False)
                     .status_code == 404, timeout=WAIT, interval=0.5, what=f"{uuid} gone")
        for kind, names in (("os-keypairs", (f"{name}-made", f"{name}-imported")),):
            for each in names:
                demo.delete(f"{api}/{kind}/{each}", raise_exc=False)
        for group in demo.get(f"{api}/os-server-groups").json()["server_groups"]:
            if group["name"].startswith(name):
                demo.delete(f"{api}/os-server-groups/{group['id']}", raise_exc=False)
        for image_id in image_ids or [each["id"] for each in _images(cloud, f"{name}-image")]:
            demo.delete(f"{_glance(cloud)}/v2/images/{image_id}", raise_exc=False)


def _glance(cloud: Cloud) -> str:
    return str(cloud.session("demo").get_endpoint(service_type="image")).rstrip("/")


def _images(cloud: Cloud, name: str) -> list[dict[str, Any]]:
    return list(cloud.session("demo").get(
        f"{_glance(cloud)}/v2/images?name={name}").json()["images"])


def _image(cloud: Cloud, name: str, status: str) -> dict[str, Any] | None:
    found = [each for each in _images(cloud, name) if each["status"] == status]
    return found[0] if found else None


def _actions(cloud: Cloud, uuid: str) -> list[str]:
    listed = cloud.session("demo").get(
        f"{cloud.api.endpoint}/servers/{uuid}/os-instance-actions").json()
    return [each["action"] for each in listed["instanceActions"]]


def test_an_admin_makes_flavors_quotas_projects_users_and_aggregates(
        cloud: Cloud, browser: Browser) -> None:  # noqa: F811
    admin = cloud.session("admin")
    api = cloud.api.endpoint
    keystone = cloud.keystone.auth_url
    name = f"dash-{uuidlib.uuid4().hex[:6]}"
    demo_id, alt_id = cloud.project_id("demo"), cloud.project_id("alt")
    host = admin.get(f"{api}/os-services?binary=nova-compute").json()["services"][0]["host"]
    defaults_before = admin.get(f"{api}/os-quota-class-sets/default").json()[
        "quota_class_set"]
    try:
        with browser.on_failure_saved():
            browser.login("admin", cloud.keystone.admin_password)

            # Flavors: Create Flavor, open to demo only (private); Modify Access: alt too.
            browser.get("admin/flavors/")
            link(browser, "Create Flavor")
            fill(browser, {"#id_name": f"{name}-flavor", "#id_vcpus": 1,
                           "#id_memory_mb": 128, "#id_disk_gb": 1})
            tab(browser, "Flavor Access")
            add_member(browser, "flavor_access", "demo")
            submit(browser)
            flavors = {each["name"]: each for each in admin.get(
                f"{api}/flavors/detail?is_public=None").json()["flavors"]}
            flavor = flavors[f"{name}-flavor"]
            assert (flavor["vcpus"], flavor["ram"], flavor["disk"],
                    flavor["os-flavor-access:is_public"]) == (1, 128, 1, False)
            assert _access(cloud, flavor["id"]) == {demo_id}
            browser.get("admin/flavors/")
            table_row_action(browser, "flavors", f"{name}-flavor", "projects")
            add_member(browser, "flavor_access", "alt")
            submit(browser)
            assert _access(cloud, flavor["id"]) == {demo_id, alt_id}

            # Defaults: Update Default Quotas.
            browser.get("admin/defaults/")
            link(browser, "Update Default Quotas")
            fill(browser, {"#id_instances": 17, "#id_cores": 33})
            submit(browser)
            now = admin.get(f"{api}/os-quota-class-sets/default").json()["quota_class_set"]
            assert (now["instances"], now["cores"]) == (17, 33)

            # Identity: Create Project, Create User in it, the project's Modify Quotas.
            browser.get("identity/")
            link(browser, "Create Project")
            fill(browser, {"#id_name": f"{name}-project"})
            submit(browser)
            project_id = wait_for(lambda: cloud.keystone._find("projects", f"{name}-project"),
                                  timeout=WAIT, interval=0.5, what="the project made")
            browser.get("identity/users/")
            link(browser, "Create User")
            fill(browser, {"#id_name": f"{name}-user", "#id_password": "dash-Pass-1234",
                           "#id_confirm_password": "dash-Pass-1234"})
            submit(browser)
            assert cloud.keystone._find("users", f"{name}-user")
            browser.get("identity/")
            table_row_action(browser, "tenants", f"{name}-project", "quotas")
            fill(browser, {"#id_instances": 3, "#id_cores": 5})
            submit(browser)
            quotas = admin.get(f"{api}/os-quota-sets/{project_id}").json()["quota_set"]
            assert (quotas["instances"], quotas["cores"]) == (3, 5)

            # Host Aggregates: Create Host Aggregate, in a zone, with the host in it.
            browser.get("admin/aggregates/")
            link(browser, "Create Host Aggregate")
            fill(browser, {"#id_name": f"{name}-aggregate",
                           "#id_availability_zone": f"{name}-zone"})
            tab(browser, "Manage Hosts within Aggregate")
            add_member(browser, "add_host_to_aggregate", host)
            submit(browser)
            aggregates = {each["name"]: each for each in
                          admin.get(f"{api}/os-aggregates").json()["aggregates"]}
            made = aggregates[f"{name}-aggregate"]
            assert (made["availability_zone"], made["hosts"]) == (f"{name}-zone", [host])
            browser.get("admin/aggregates/")
            browser.save("aggregates")
            judge_log(browser, api)
    finally:
        _clean_admin(cloud, name, defaults_before, keystone)


def _access(cloud: Cloud, flavor_id: str) -> set[str]:
    listed = cloud.session("admin").get(
        f"{cloud.api.endpoint}/flavors/{flavor_id}/os-flavor-access").json()
    return {each["tenant_id"] for each in listed["flavor_access"]}


def _clean_admin(cloud: Cloud, name: str, defaults: dict[str, Any], keystone: str) -> None:
    admin = cloud.session("admin")
    api = cloud.api.endpoint
    admin.put(f"{api}/os-quota-class-sets/default", json={"quota_class_set": {
        key: defaults[key] for key in ("instances", "cores")}}, raise_exc=False)
    for aggregate in admin.get(f"{api}/os-aggregates").json()["aggregates"]:
        if aggregate["name"] == f"{name}-aggregate":
            for host in aggregate["hosts"]:
                admin.post(f"{api}/os-aggregates/{aggregate['id']}/action",
                           json={"remove_host": {"host": host}}, raise_exc=False)
            admin.delete(f"{api}/os-aggregates/{aggregate['id']}", raise_exc=False)
    for flavor in admin.get(f"{api}/flavors/detail?is_public=None").json()["flavors"]:
        if flavor["name"] == f"{name}-flavor":
            admin.delete(f"{api}/flavors/{flavor['id']}", raise_exc=False)
    for kind in ("users", "projects"):
        found = cloud.keystone._find(kind, f"{name}-{kind[:-1]}")
        if found:
            admin.delete(f"{keystone}/{kind}/{found}", raise_exc=False)
