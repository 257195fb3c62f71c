"""Horizon on the session's Keystone (its catalog names the cloud), driven by Debian's
headless Chromium through Selenium: the fixtures `dashboard` (Horizon,
tools/local_services/horizon.py) and `browser` (a `Browser`), and the reading of Horizon's
log (`api_faults`, `tracebacks`).

Chromium trusts exactly the dashboard's key (`--ignore-certificate-errors-spki-list` with
its certificate's public key digest), not every certificate: the cluster CA is not in its
trust store. Nothing is downloaded at run time (Selenium's driver manager stays offline:
the driver is Debian's chromedriver).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from etcd_compute.pki import Pki
from tests.support import running, unavailable, wait_for
from tools.local_services.horizon import HorizonServer
from tools.local_services.keystone import KeystoneServer
from tools.local_services.process import HORIZON_VENV

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
PAGE_TIMEOUT = 90


@pytest.fixture
def dashboard(keystone_server: KeystoneServer, cluster_pki: Pki,
              tmp_path: Path) -> Iterator[HorizonServer]:
    """Horizon on the session's Keystone (its catalog: the test's compute API, Glance, and
    Neutron where the test's cloud has it)."""
    if not (HORIZON_VENV / "bin" / "gunicorn").exists():
        unavailable(f"Horizon is not installed in {HORIZON_VENV} (make install builds it)")
    services = keystone_server.session().get(keystone_server.auth_url + "/services?type=network")
    neutron = bool(services.json()["services"])
    server = HorizonServer.create(tmp_path / "horizon", pki=cluster_pki)
    with running(server, lambda: server.start(keystone_server.auth_url,
                                              keystone_server.ca_file, neutron=neutron)):
        yield server


def spki_digest(cert: Path) -> str:
    """base64(SHA-256(SubjectPublicKeyInfo)) of `cert`: what Chromium pins a key by."""
    public = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    der = public.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    return base64.b64encode(hashlib.sha256(der).digest()).decode()


@dataclass
class Browser:
    driver: Any
    dashboard: HorizonServer
    evidence: Path

    def get(self, path: str) -> None:
        self.driver.get(self.dashboard.url + path.lstrip("/"))
        self.ready()

    def ready(self) -> None:
        """The page loaded and jQuery's and Angular's requests answered."""
        wait_for(lambda: self.driver.execute_script(
            "return document.readyState === 'complete' && "
            "(typeof jQuery === 'undefined' || jQuery.active === 0)"),
            timeout=PAGE_TIMEOUT, interval=0.2, what="the page to load")

    def find(self, css: str, timeout: float = PAGE_TIMEOUT, within: Any = None) -> Any:
        """The first visible element matching `css`, waited for."""
        from selenium.common.exceptions import StaleElementReferenceException

        def visible() -> Any:
            with contextlib.suppress(StaleElementReferenceException):
                for element in (within or self.driver).find_elements("css selector", css):
                    if element.is_displayed():
                        return element
            return None

        return wait_for(visible, timeout=timeout, interval=0.2, what=f"{css} visible")

    def xpath(self, path: str, timeout: float = PAGE_TIMEOUT, within: Any = None) -> Any:
        def visible() -> Any:
            found = [e for e in (within or self.driver).find_elements("xpath", path)
                     if e.is_displayed()]
            return found[0] if found else None

        return wait_for(visible, timeout=timeout, interval=0.2, what=f"{path} visible")

    def click(self, element: Any) -> None:
        """A click as the page's script sees it (also on an item of a closed menu)."""
        self.driver.execute_script("arguments[0].click();", element)

    def login(self, user: str, password: str) -> None:
        self.driver.delete_all_cookies()
        self.get("auth/login/")
        self.find("#id_username").send_keys(user)
        self.find("#id_password").send_keys(password)
        self.click(self.find("#loginBtn"))
        wait_for(lambda: "/auth/login" not in self.driver.current_url,
                 timeout=PAGE_TIMEOUT, interval=0.2, what=f"{user} logged in")
        self.ready()

    def save(self, name: str) -> Path:
        """A screenshot and the page's HTML under the test's directory."""
        self.evidence.mkdir(parents=True, exist_ok=True)
        png = self.evidence / f"{name}.png"
        self.driver.save_screenshot(str(png))
        (self.evidence / f"{name}.html").write_text(self.driver.page_source)
        return png

    @contextlib.contextmanager
    def on_failure_saved(self) -> Iterator[None]:
        """On any failure inside: the page's screenshot and HTML, and Horizon's log, kept
        under the test's directory (named in the failure)."""
        try:
            yield
        except BaseException as exc:
            with contextlib.suppress(Exception):
                self.save("failure")
            with contextlib.suppress(Exception):  # the page's (and its frames') console
                (self.evidence / "browser-console.log").write_text("\n".join(
                    str(entry) for entry in self.driver.get_log("browser")))
            with contextlib.suppress(OSError):
                shutil.copy(self.dashboard.log_path, self.evidence / "horizon.log")
            exc.add_note(f"evidence (screenshot, page, Horizon's log): {self.evidence}")
            raise


@pytest.fixture
def browser(dashboard: HorizonServer, tmp_path: Path) -> Iterator[Browser]:
    """Headless Chromium (Debian's) through its chromedriver, trusting the dashboard's key."""
    if not CHROMIUM.exists() or not CHROMEDRIVER.exists():
        unavailable("chromium and chromium-driver are missing (tools/install.sh installs them)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service as DriverService
    except ImportError:
        unavailable("selenium is missing from .venv (requirements-test.txt; make install)")
    assert dashboard.pki is not None
    cert = dashboard.pki.cert("horizon")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1400,1000", "--no-first-run",
                     f"--user-data-dir={tmp_path / 'chromium'}",
                     f"--ignore-certificate-errors-spki-list={spki_digest(cert)}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager: never fetch a browser or driver
    driver = webdriver.Chrome(options=options, service=DriverService(
        executable_path=str(CHROMEDRIVER), log_output=str(tmp_path / "chromedriver.log")))
    driver.set_page_load_timeout(PAGE_TIMEOUT)
    try:
        yield Browser(driver, dashboard, tmp_path / "evidence")
    finally:
        driver.quit()


# --------------------------------------------------------------- Horizon's log

# keystoneauth's debug lines (horizon.py's LOGGING: "<time> <pid> <thread> DEBUG ...").
_LINE = re.compile(r"^\S+ \S+ (?P<pid>\d+) (?P<thread>\d+) (?P<level>[A-Z]+) (?P<name>\S+) "
                   r"(?P<message>.*)$")
_REQUEST = re.compile(r"REQ: curl .*? -X (?P<method>[A-Z]+) \"?(?P<url>[^\s\"]+)")
_RESPONSE = re.compile(r"RESP: \[(?P<status>\d{3})\]")


@dataclass(frozen=True)
class Fault:
    method: str
    url: str
    status: int

    def __str__(self) -> str:
        return f"{self.method} {self.url} -> {self.status}"


def api_faults(log: str) -> list[Fault]:
    """Every call Horizon made that was answered 4xx or 5xx, by method, URL and status (a
    request and its answer paired by process and thread)."""
    pending: dict[tuple[str, str], tuple[str, str]] = {}
    faults: list[Fault] = []
    for line in log.splitlines():
        matched = _LINE.match(line)
        if not matched:
            continue
        where = (matched["pid"], matched["thread"])
        if request := _REQUEST.search(matched["message"]):
            pending[where] = (request["method"], request["url"])
        elif (response := _RESPONSE.search(matched["message"])) and where in pending:
            method, url = pending.pop(where)
            if int(response["status"]) >= 400:
                faults.append(Fault(method, url, int(response["status"])))
    return faults


_RECORD_START = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")


def tracebacks(log: str) -> list[str]:
    """Each log record of Horizon's that holds a traceback, whole (its first line says who
    logged it, its last the exception)."""
    records: list[list[str]] = []
    for line in log.splitlines():
        if _RECORD_START.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return ["\n".join(record).rstrip() for record in records
            if any(line.startswith("Traceback (most recent call last)") for line in record)]


# Horizon's own failure, not an answer of ours: its launch wizard asks Glance for the
# metadata definitions of Cinder's volumes (OS::Cinder::Volumes) even with volumes turned
# off; none match, and it asks for the details of zero namespaces in a pool of zero
# threads, which futurist refuses. (The other resource types have Glance's definitions:
# tools/local_services/glance.py loads them.)
HORIZON_EMPTY_METADEFS = ("metadefs_namespace_full_list",
                          "ValueError: max_workers must be greater than zero")


def horizons_own(traceback: str) -> bool:
    where, what = HORIZON_EMPTY_METADEFS
    return where in traceback and traceback.endswith(what)


def judge_log(browser: Browser, api: str, nova_too: Any = lambda fault: False) -> None:
    """Horizon's log so far: no traceback (but Horizon's own above), and no 4xx/5xx of our
    API's at `api` that Nova would not give (`nova_too(fault)`: one it would). Keystone's,
    Neutron's and Glance's answers are theirs, printed only."""
    log = browser.dashboard.log_path.read_text(errors="replace")
    ours = [fault for fault in api_faults(log) if fault.url.startswith(api + "/")]
    print("others' 4xx/5xx:", *(f for f in api_faults(log) if f not in ours), sep="\n")
    faults = [fault for fault in ours if not nova_too(fault)]
    assert not faults, "answers Nova would not give:\n" + "\n".join(map(str, faults))
    found = [each for each in tracebacks(log) if not horizons_own(each)]
    assert not found, "\n\n".join(found)


def row_text(browser: Browser, uuid: str) -> str:
    rows = browser.driver.find_elements("css selector", f"tr[data-object-id='{uuid}']")
    return rows[0].text if rows else ""


def row_action(browser: Browser, uuid: str, action: str) -> None:
    """Click the row's `action` (one of Horizon's table actions: stop, start, snapshot,
    delete...), from its menu or as its button."""
    row = browser.find(f"tr[data-object-id='{uuid}']")
    browser.click(row.find_element("css selector", f"[id$='__action_{action}']"))


def confirm(browser: Browser) -> None:
    """The confirmation modal of a table action, accepted."""
    browser.click(browser.find(".modal-dialog .modal-footer .btn-danger, "
                               ".modal-dialog .modal-footer .btn-primary"))
    browser.ready()


def wait_page(browser: Browser, check: Any, what: str, timeout: float = 300,
              reload_every: float = 5) -> Any:
    """`check()` true on the current page, reloaded every few seconds until it is."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen in {timeout:.0f} s")
        time.sleep(reload_every)
        browser.driver.refresh()
        browser.ready()
