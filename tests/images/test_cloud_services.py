"""Keystone and Glance as the session starts them (as `make up` does): the `openstack`
command line lists images through real keystoneauth with clouds.yaml; each project sees
what Glance lets it see; the service user reads every project's images; nothing answers
without a token, over plain HTTP, or beyond loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from etcd_compute.errors import NotFound
from etcd_compute.glance import GlanceClient
from tests.support import REPO, unavailable
from tools.local_services import CLIENTS_VENV, cloud

OPENSTACK = CLIENTS_VENV / "bin" / "openstack"


def openstack(clouds: Path, cloud_name: str, *args: str) -> subprocess.CompletedProcess[str]:
    if not OPENSTACK.exists():
        unavailable(f"python-openstackclient is not installed in {CLIENTS_VENV} (make install)")
    return subprocess.run([str(OPENSTACK), "--os-cloud", cloud_name, *args, "-f", "json"],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})


@pytest.fixture
def clouds(tmp_path: Path, keystone_server: Any) -> Path:
    return cloud.write_clouds_yaml(keystone_server, tmp_path / "clouds.yaml")


@pytest.fixture
def project_glance(keystone_server: Any, glance_server: Any) -> Any:
    """A Glance client as `user` (demo or alt) on its own project, not the service user."""

    def as_member(user: str) -> GlanceClient:
        return GlanceClient(glance_server.client_config(
            keystone_server.client_section(user, None, user)))

    return as_member


def test_openstack_image_list_works_with_clouds_yaml_for_demo_and_admin(
        clouds, glance_config, tmp_path):
    service = GlanceClient(glance_config)
    payload = tmp_path / "disk.raw"
    payload.write_bytes(b"\0" * 65536)
    image, uploaded = cloud.upload_image(service, payload, "cloud-services-public")
    try:
        assert uploaded and image["status"] == "active" and image["disk_format"] == "raw"
        for cloud_name in ("etcd-compute-demo", "etcd-compute"):
            listed = openstack(clouds, cloud_name, "image", "list")
            assert listed.returncode == 0, listed.stderr
            assert image["id"] in {row["ID"] for row in json.loads(listed.stdout)}
        # The same content again is the same image, not a second one.
        again, uploaded = cloud.upload_image(service, payload, "cloud-services-public")
        assert (again["id"], uploaded) == (image["id"], False)
    finally:
        service.delete(image["id"])


def test_a_private_image_is_seen_by_its_project_and_the_service_user_only(
        clouds, glance_config, project_glance):
    demo = project_glance("demo")
    image = demo.create("demo-private", "raw", visibility="private")
    try:
        demo.upload(image["id"], iter([b"x" * 4096]))
        service = GlanceClient(glance_config)
        # Glance's own answer to alt: not found.
        alt = openstack(clouds, "etcd-compute-alt", "image", "show", image["id"])
        assert alt.returncode != 0 and "No Image found" in alt.stderr, alt.stderr
        assert service.get(image["id"])["owner"] == image["owner"]
        # Our reading of Glance's rule agrees with Glance.
        owner = image["owner"]
        alt_project = project_glance("alt").session.get_project_id()
        assert service.find(image["id"], owner)["id"] == image["id"]
        with pytest.raises(NotFound):
            service.find(image["id"], alt_project)
        with pytest.raises(NotFound):
            service.find("demo-private", alt_project)
        # The service user downloads it (what a compute host does).
        with service.download(image["id"]) as response:
            assert b"".join(response.iter_content(1024)) == b"x" * 4096
    finally:
        demo.delete(image["id"])


def test_nothing_answers_without_a_token_over_plain_http_or_beyond_loopback(
        keystone_server, glance_server, cluster_pki):
    ca = str(cluster_pki.ca_cert)
    assert requests.get(glance_server.endpoint + "/v2/images", verify=ca,
                        timeout=10).status_code == 401
    assert requests.get(glance_server.endpoint + "/v2/images", verify=ca, timeout=10,
                        headers={"X-Auth-Token": "forged"}).status_code == 401
    for url in (glance_server.endpoint, keystone_server.auth_url):
        assert url.startswith("https://127.0.0.1:")
        with pytest.raises(requests.ConnectionError):
            requests.get(url.replace("https://", "http://"), timeout=10)
        # Verified with the cluster CA, refused without it.
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(url, timeout=10)
    for port in (glance_server.port, keystone_server.port):
        listening = _listening_addresses(port)
        assert listening and listening <= {"127.0.0.1"}, listening


def _listening_addresses(port: int) -> set[str]:
    """The local addresses a TCP socket listens on at `port` (from /proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) != port or fields[3] != "0A":  # 0A: LISTEN
                continue
            if len(address) == 8:
                found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
            else:
                found.add(f"ipv6:{address}")
    return found


def test_docker_sh_bootstraps_a_keystone_started_elsewhere_again_without_harm(
        keystone_server, glance_server, cluster_pki, tmp_path):
    """docker.sh's step (`python -m tools.local_services.cloud bootstrap`), against the
    session's Keystone: idempotent, and its clouds.yaml works."""
    clouds = tmp_path / "docker-clouds.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "tools.local_services.cloud", "bootstrap",
         str(keystone_server.run_dir), "--keystone", f"127.0.0.1:{keystone_server.port}",
         "--pki", str(cluster_pki.directory), "--glance", glance_server.endpoint,
         "--clouds", str(clouds)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert oct(clouds.stat().st_mode & 0o777) == "0o600"
    listed = openstack(clouds, "etcd-compute", "catalog", "list")
    assert listed.returncode == 0, listed.stderr
    # The session's API tests may have added compute to this Keystone's catalog already.
    assert {"identity", "image", "placement"} <= {row["Type"] for row in json.loads(listed.stdout)}
