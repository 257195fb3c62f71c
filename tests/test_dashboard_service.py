"""Horizon as a local service (tools/local_services/horizon.py), its boundaries: the settings
file holding the run's secret key is 0600, outside the repository, made anew each run
(another key each time) and removed at stop; the dashboard answers over TLS on the address
it was given only; its CSRF cookie is Secure; a form posted without the CSRF token, or from
another origin, is refused (Horizon's CSRF failure view); the session cookie is configured
Secure and HttpOnly. No Keystone is needed: the login page is Horizon's own."""

from __future__ import annotations

import functools
import re
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from etcd_compute.pki import Pki
from tests.support import running, unavailable
from tools.local_services.horizon import HorizonServer
from tools.local_services.process import HORIZON_VENV, REPO


@pytest.fixture
def horizon(tmp_path: Path, cluster_pki: Pki) -> Iterator[HorizonServer]:
    if not (HORIZON_VENV / "bin" / "gunicorn").exists():
        unavailable(f"Horizon is not installed in {HORIZON_VENV} (make install builds it)")
    server = HorizonServer.create(tmp_path / "horizon", pki=cluster_pki)
    # Nothing answers there: the login page does not ask Keystone.
    with running(server, lambda: server.start("https://127.0.0.1:9/v3",
                                              str(cluster_pki.ca_cert))):
        yield server


def secret_key(settings: Path) -> str:
    found = re.search(r"^SECRET_KEY = '([^']+)'$", settings.read_text(), re.M)
    assert found
    return found[1]


def csrf_refused(answer: requests.Response) -> bool:
    """Horizon's answer to a failed CSRF check (its CSRF_FAILURE_VIEW): back to the login
    page, the reason in the query, nothing done."""
    return answer.status_code == 302 and "csrf_failure=" in answer.headers["Location"]


def test_the_secret_key_is_the_runs_own_and_kept_0600(horizon: HorizonServer) -> None:
    settings = horizon.run_dir / "local" / "local_settings.py"
    assert stat.S_IMODE(settings.stat().st_mode) == 0o600
    assert not settings.resolve().is_relative_to(REPO)
    first = secret_key(settings)
    assert len(first) >= 40
    text = settings.read_text()
    for line in ("SESSION_COOKIE_SECURE = True", "SESSION_COOKIE_HTTPONLY = True",
                 "CSRF_COOKIE_SECURE = True", "ALLOWED_HOSTS = ['127.0.0.1', 'localhost']"):
        assert line in text
    horizon.stop()
    assert not settings.exists() and not (horizon.run_dir / "cache").exists()
    assert horizon.pki is not None
    horizon.start("https://127.0.0.1:9/v3", str(horizon.pki.ca_cert))
    assert secret_key(settings) != first


def test_only_tls_on_the_address_given(horizon: HorizonServer) -> None:
    assert horizon.pki is not None
    answer = requests.get(horizon.url + "auth/login/", verify=str(horizon.pki.ca_cert),
                          timeout=30)
    assert answer.status_code == 200
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{horizon.port}/auth/login/", timeout=30)
    # Another loopback address of this machine: nothing listens there.
    with socket.socket() as sock:
        sock.settimeout(2)
        assert sock.connect_ex(("127.0.0.2", horizon.port)) != 0


def test_a_login_without_the_csrf_token_or_from_elsewhere_is_refused(
        horizon: HorizonServer) -> None:
    assert horizon.pki is not None
    session = requests.Session()
    # Per request: a REQUESTS_CA_BUNDLE in the environment outranks a session's `verify`.
    session.get = functools.partial(session.get, verify=str(horizon.pki.ca_cert))
    session.post = functools.partial(session.post, verify=str(horizon.pki.ca_cert))
    page = session.get(horizon.url + "auth/login/", timeout=30)
    cookie = next(c for c in session.cookies if c.name == "csrftoken")
    assert cookie.secure
    form = {"username": "demo", "password": "x", "region": "default"}
    refused = session.post(horizon.url + "auth/login/", data=form, timeout=30,
                           headers={"Referer": horizon.url + "auth/login/"},
                           allow_redirects=False)
    assert csrf_refused(refused)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert token
    forged = session.post(horizon.url + "auth/login/", timeout=30,
                          data={**form, "csrfmiddlewaretoken": token[1]},
                          headers={"Origin": "https://evil.example",
                                   "Referer": "https://evil.example/"},
                          allow_redirects=False)
    assert csrf_refused(forged)
    # With the token and from its own origin, the form is taken (Keystone is unreachable
    # here, so the login fails on the page itself: 200, not a CSRF refusal).
    taken = session.post(horizon.url + "auth/login/", timeout=60,
                         data={**form, "csrfmiddlewaretoken": token[1]},
                         headers={"Referer": horizon.url + "auth/login/"},
                         allow_redirects=False)
    assert taken.status_code == 200 and not csrf_refused(taken)


def test_a_static_path_with_doubled_slashes_is_the_same_file(horizon: HorizonServer) -> None:
    """As nginx or Apache in front of Horizon serve it (Horizon's Images panel asks for
    `app/core/images//actions/...`); merging slashes reaches no file outside the static
    root."""
    assert horizon.pki is not None
    ca = str(horizon.pki.ca_cert)
    file = "static/app/core/images/actions/delete-image-selected-button.template.html"
    plain = requests.get(horizon.url + file, verify=ca, timeout=30)
    assert plain.status_code == 200
    doubled = requests.get(horizon.url + file.replace("images/", "images//"), verify=ca,
                           timeout=30)
    assert (doubled.status_code, doubled.content) == (200, plain.content)
    for outside in ("static//..//..//etc/passwd", "static/%2e%2e//%2e%2e//etc/passwd",
                    "static//local//local_settings.py"):
        answer = requests.get(horizon.url + outside, verify=ca, timeout=30)
        assert answer.status_code == 404 and b"SECRET_KEY" not in answer.content, outside
