"""A pytest plugin (`-p tools.horizon_tests.chromium`): Horizon's own selenium tests
(openstack_dashboard/test/selenium) in Debian's headless Chromium through its chromedriver,
where their conftest starts Firefox under Xvfb (xvfbwrapper).

Their `driver` fixture calls `selenium.webdriver.firefox.webdriver.WebDriver(options=...)`
and their `xdisplay` fixture `xvfbwrapper.Xvfb(...)`: a conftest's fixture outranks a
plugin's, so this plugin replaces the two names they call instead. Chromium is headless
itself (no X display), downloads into the folder their fixture names (`driver.TEMPDIR`), and
trusts exactly the
dashboard's key (`HORIZON_TESTS_SPKI`: base64 SHA-256 of its public key), not every
certificate. Nothing is downloaded at run time (Selenium Manager offline).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.firefox import webdriver as firefox_webdriver

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")


class NoDisplay:
    """xvfbwrapper.Xvfb's stand-in: no X server (Chromium is headless)."""

    def __init__(self, width: int = 1920, height: int = 1080, **_: Any) -> None:
        self.width, self.height = width, height
        self.new_display = 0
        self.extra_xvfb_args: list[str] = []

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


def chromium(options: Any = None, **_: Any) -> Any:
    """Firefox's WebDriver(options=...) answered with headless Chromium (the Firefox
    options, a download folder in its profile, are dropped)."""
    chrome = webdriver.ChromeOptions()
    chrome.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1920,1080", "--no-first-run",
                     f"--ignore-certificate-errors-spki-list={os.environ['HORIZON_TESTS_SPKI']}"):
        chrome.add_argument(argument)
    os.environ["SE_OFFLINE"] = "true"
    return Chromium(options=chrome, service=Service(executable_path=str(CHROMEDRIVER)))


class Chromium(webdriver.Chrome):
    """Their conftest names its download folder `driver.TEMPDIR` (Firefox's profile had
    it): Chromium is told to download there."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "TEMPDIR":
            self.execute_cdp_cmd("Browser.setDownloadBehavior",
                                 {"behavior": "allow", "downloadPath": str(value)})


firefox_webdriver.WebDriver = chromium  # type: ignore[misc,assignment]
xvfbwrapper = types.ModuleType("xvfbwrapper")
xvfbwrapper.Xvfb = NoDisplay  # type: ignore[attr-defined]
sys.modules["xvfbwrapper"] = xvfbwrapper
