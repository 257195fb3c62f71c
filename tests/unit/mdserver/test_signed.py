"""mdserver/signed.py: who is asking through Neutron's metadata agent. A request names its
instance in X-Instance-ID and proves it with X-Instance-ID-Signature (HMAC-SHA256 of the id
keyed with the shared secret); a request without a good signature is refused (403) before
anything is read. Over a duck-typed libvirt connection (no libvirtd)."""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import uuid as uuidlib
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver import password, signed
from etcd_compute.mdserver.server import MetadataApp
from etcd_compute.mdserver.settings import MdserverConfig
from etcd_compute.mdserver.signed import Forbidden, SignedResolver, read_secret, signature
from etcd_compute.virt.domain import NAMESPACE
from etcd_compute.virt.instance_files import InstanceFiles

SECRET = b"s3cret-of-this-run"
PROJECT = "5d2c3b4a6e7f4a518f0e0b7e4f1e9a0c"


class FakeDomain:
    def __init__(self, ours: bool = True, active: bool = True):
        self.ours, self.active = ours, active

    def isActive(self) -> int:  # noqa: N802 (libvirt's names)
        return int(self.active)

    def metadata(self, kind: int, uri: str, flags: int = 0) -> str:
        if kind == libvirt.VIR_DOMAIN_METADATA_ELEMENT and uri == NAMESPACE and self.ours:
            return "<instance/>"
        raise libvirt.libvirtError("metadata not found: Requested metadata element is not present")


class FakeConnection:
    """The domains of this hypervisor by name; records every lookup."""

    def __init__(self, domains: dict[str, FakeDomain]):
        self.domains = domains
        self.looked_up: list[str] = []

    def isAlive(self) -> bool:  # noqa: N802
        return True

    def lookupByName(self, name: str) -> FakeDomain:  # noqa: N802
        self.looked_up.append(name)
        if name not in self.domains:
            raise libvirt.libvirtError(f"Domain not found: no domain with matching name '{name}'")
        return self.domains[name]


@pytest.fixture
def instances_dir(tmp_path: Path) -> Path:
    return tmp_path / "instances"


def instance(instances_dir: Path) -> str:
    """An instance's meta.json where the resolver looks: its uuid."""
    uuid = str(uuidlib.uuid4())
    files = InstanceFiles.of(instances_dir, uuid)
    files.create()
    meta: dict[str, Any] = {"uuid": uuid, "name": "web-1", "hostname": "web-1",
                            "user_data": None, "ssh_key": None}
    files.write_meta(meta)
    return uuid


def resolver(instances_dir: Path, connection: FakeConnection) -> SignedResolver:
    found = SignedResolver(MdserverConfig(instances_dir=str(instances_dir), mode="signed",
                                          bind_address="127.0.0.1", port=8775), SECRET)
    found.libvirt._connection = connection  # what `connection` would have opened
    return found


def request(instance_id: str | None, sign: str | None = None, project: str = PROJECT,
            **more: str) -> dict[str, Any]:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/openstack/latest/meta_data.json",
               "REMOTE_ADDR": "127.0.0.1", "HTTP_X_TENANT_ID": project,
               "HTTP_X_FORWARDED_FOR": "10.0.0.5", **more}
    if instance_id is not None:
        environ["HTTP_X_INSTANCE_ID"] = instance_id
    if sign is not None:
        environ["HTTP_X_INSTANCE_ID_SIGNATURE"] = sign
    return environ


def neutron_signature(instance_id: str) -> str:
    """As Neutron's metadata agent signs (neutron/agent/metadata/agent.py)."""
    return hmac.new(SECRET, instance_id.encode("utf-8"), hashlib.sha256).hexdigest()


def call(app: MetadataApp, environ: dict[str, Any]) -> tuple[str, bytes]:
    started: list[str] = []
    body = b"".join(app(environ, lambda status, headers: started.append(status)))
    return started[0], body


class Reads:
    """Every meta.json read and every libvirt lookup, to show a refused request made none."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.meta: list[Path] = []
        read = InstanceFiles.read_meta

        def spy(files: InstanceFiles) -> dict[str, Any] | None:
            self.meta.append(files.directory)
            return read(files)

        monkeypatch.setattr(InstanceFiles, "read_meta", spy)


# -- the attack first: a forged X-Instance-ID ------------------------------------------


@pytest.mark.parametrize("sign", [
    None,                                          # no signature at all
    "",                                            # an empty one
    "0" * 64,                                      # a wrong one of the right shape
    hmac.new(b"another secret", b"x", hashlib.sha256).hexdigest(),
    "é" * 64,                                      # not even ASCII (latin-1 from WSGI)
])
def test_a_forged_instance_id_without_its_signature_is_403_and_nothing_read(
        instances_dir, monkeypatch, sign):
    victim = instance(instances_dir)
    connection = FakeConnection({victim: FakeDomain()})
    reads = Reads(monkeypatch)
    app = MetadataApp(resolver(instances_dir, connection))
    status, body = call(app, request(victim, sign))
    assert (status, body) == ("403 Forbidden", b"")
    assert reads.meta == [] and connection.looked_up == []


def test_the_signature_of_another_instance_does_not_open_this_one(instances_dir, monkeypatch):
    mine, victim = instance(instances_dir), instance(instances_dir)
    connection = FakeConnection({mine: FakeDomain(), victim: FakeDomain()})
    reads = Reads(monkeypatch)
    app = MetadataApp(resolver(instances_dir, connection))
    assert call(app, request(victim, neutron_signature(mine)))[0] == "403 Forbidden"
    assert reads.meta == [] and connection.looked_up == []


def test_a_signature_in_upper_case_hex_is_not_the_signature(instances_dir):
    victim = instance(instances_dir)
    app = MetadataApp(resolver(instances_dir, FakeConnection({victim: FakeDomain()})))
    assert call(app, request(victim, neutron_signature(victim).upper()))[0] == "403 Forbidden"


def test_a_signed_request_without_an_instance_id_is_403(instances_dir):
    app = MetadataApp(resolver(instances_dir, FakeConnection({})))
    assert call(app, request(None, neutron_signature("")))[0] == "403 Forbidden"
    assert call(app, request("", neutron_signature("")))[0] == "403 Forbidden"


def post_password(instance_id: str, sign: str | None, body: bytes,
                  forwarded_for: str = "10.0.0.5") -> dict[str, Any]:
    return request(instance_id, sign, PATH_INFO="/openstack/2013-10-17/password",
                   REQUEST_METHOD="POST", CONTENT_LENGTH=str(len(body)),
                   HTTP_X_FORWARDED_FOR=forwarded_for, **{"wsgi.input": io.BytesIO(body)})


@pytest.mark.parametrize("sign", [None, "0" * 64, "mine"])
def test_a_password_posted_for_another_instance_without_its_signature_is_403_and_not_kept(
        instances_dir, sign):
    mine, victim = instance(instances_dir), instance(instances_dir)
    app = MetadataApp(resolver(instances_dir, FakeConnection({mine: FakeDomain(),
                                                              victim: FakeDomain()})))
    given = neutron_signature(mine) if sign == "mine" else sign
    assert call(app, post_password(victim, given, b"hijacked")) == ("403 Forbidden", b"")
    for uuid in (mine, victim):
        assert not InstanceFiles.of(instances_dir, uuid).password.exists()


def test_a_signed_password_is_kept_for_its_own_instance_only(instances_dir, monkeypatch):
    monkeypatch.setattr(password, "PUBLISH_WAIT_SECONDS", 0)
    mine, other = instance(instances_dir), instance(instances_dir)
    app = MetadataApp(resolver(instances_dir, FakeConnection({mine: FakeDomain(),
                                                              other: FakeDomain()})))
    assert call(app, post_password(mine, neutron_signature(mine), b"secret")) == ("200 OK", b"")
    assert InstanceFiles.of(instances_dir, mine).read_password() == "secret"
    assert not InstanceFiles.of(instances_dir, other).password.exists()
    again = call(app, post_password(mine, neutron_signature(mine), b"again"))
    assert again == ("409 Conflict", b"a password is set already\n")
    too_long = call(app, post_password(other, neutron_signature(other), b"x" * 257))
    assert too_long[0] == "400 Bad Request"
    assert not InstanceFiles.of(instances_dir, other).password.exists()
    get = request(mine, neutron_signature(mine), PATH_INFO="/openstack/latest/password")
    assert call(app, get) == ("200 OK", b"secret")


@pytest.mark.parametrize(("forwarded_for", "local"), [
    ("10.0.0.5", b"10.0.0.5"), ("10.0.0.5, 10.9.9.9", b""), ("fe80::1", b""), ("", b"")])
def test_local_ipv4_is_the_address_the_agent_names(instances_dir, forwarded_for, local):
    mine = instance(instances_dir)
    app = MetadataApp(resolver(instances_dir, FakeConnection({mine: FakeDomain()})))
    environ = request(mine, neutron_signature(mine), PATH_INFO="/latest/meta-data/local-ipv4",
                      HTTP_X_FORWARDED_FOR=forwarded_for)
    assert call(app, environ) == ("200 OK", local)


# -- signed: the instance's own data ----------------------------------------------------


def test_a_request_signed_for_an_instance_of_ours_gets_its_meta(instances_dir):
    mine = instance(instances_dir)
    connection = FakeConnection({mine: FakeDomain()})
    app = MetadataApp(resolver(instances_dir, connection))
    status, body = call(app, request(mine, neutron_signature(mine)))
    assert status == "200 OK" and f'"uuid": "{mine}"' in body.decode()
    assert connection.looked_up == [mine]


@pytest.mark.parametrize("instance_id", [
    "../../etc",                                   # a path
    "not-a-uuid",
    "6F1C1B0E-8A4E-4A57-9A53-0F3C6D1E2A11",        # our uuids are lower case
    "6f1c1b0e-8a4e-4a57-9a53-0f3c6d1e2a11\n",
])
def test_a_signed_id_that_is_not_an_instance_uuid_is_404_and_nothing_read(
        instances_dir, monkeypatch, instance_id):
    # Signed with the secret: the agent (or whoever holds the secret) vouches for it, but
    # it still becomes a path only as a uuid.
    connection = FakeConnection({})
    reads = Reads(monkeypatch)
    app = MetadataApp(resolver(instances_dir, connection))
    assert call(app, request(instance_id, neutron_signature(instance_id)))[0] == "404 Not Found"
    assert reads.meta == [] and connection.looked_up == []


@pytest.mark.parametrize(("domains", "why"), [
    ({}, "no domain of that name on this hypervisor"),
    ({"ours": False}, "a domain that is not ours"),
    ({"active": False}, "ours, but not running: no guest to ask"),
])
def test_an_instance_not_running_here_as_ours_gets_nothing(instances_dir, monkeypatch,
                                                            domains, why):
    uuid = instance(instances_dir)
    connection = FakeConnection({uuid: FakeDomain(**domains)} if domains else {})
    reads = Reads(monkeypatch)
    app = MetadataApp(resolver(instances_dir, connection))
    assert call(app, request(uuid, neutron_signature(uuid)))[0] == "404 Not Found", why
    assert reads.meta == []


def test_a_missing_meta_json_is_404(instances_dir):
    uuid = instance(instances_dir)
    InstanceFiles.of(instances_dir, uuid).meta.unlink()
    app = MetadataApp(resolver(instances_dir, FakeConnection({uuid: FakeDomain()})))
    assert call(app, request(uuid, neutron_signature(uuid)))[0] == "404 Not Found"


def test_a_libvirt_error_is_404_not_a_crash(instances_dir):
    uuid = instance(instances_dir)

    class Broken(FakeConnection):
        def lookupByName(self, name: str) -> FakeDomain:  # noqa: N802
            raise libvirt.libvirtError("Cannot recv data: Connection reset by peer")

    app = MetadataApp(resolver(instances_dir, Broken({})))
    assert call(app, request(uuid, neutron_signature(uuid)))[0] == "404 Not Found"


def test_the_signature_is_neutrons():
    instance_id = "6f1c1b0e-8a4e-4a57-9a53-0f3c6d1e2a11"
    assert signature(SECRET, instance_id) == neutron_signature(instance_id)


# -- the secret -------------------------------------------------------------------------


def test_the_secret_is_the_files_content_without_its_line_end(tmp_path):
    path = tmp_path / "secret"
    path.write_bytes(b"abc123\n")
    path.chmod(0o600)
    assert read_secret(str(path)) == b"abc123"


@pytest.mark.parametrize(("mode", "content", "message"), [
    (0o644, b"abc\n", "readable by others than its owner"),
    (0o640, b"abc\n", "readable by others than its owner"),
    (0o600, b"\n", "is empty"),
])
def test_a_secret_others_may_read_or_an_empty_one_is_a_config_error(tmp_path, mode, content,
                                                                      message):
    path = tmp_path / "secret"
    path.write_bytes(content)
    path.chmod(mode)
    with pytest.raises(ConfigError, match=message):
        read_secret(str(path))


def test_a_missing_secret_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        read_secret(str(tmp_path / "nothing"))


def test_the_secret_is_not_followed_through_a_symlink(tmp_path):
    real = tmp_path / "real"
    real.write_bytes(b"abc\n")
    real.chmod(0o600)
    link = tmp_path / "link"
    os.symlink(real, link)
    with pytest.raises(ConfigError, match="cannot read"):
        read_secret(str(link))


def test_forbidden_is_one_status():
    assert Forbidden.status == "403 Forbidden" and signed.__doc__
