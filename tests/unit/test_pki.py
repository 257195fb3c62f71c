"""pki.py: the CA and what it issues (real keys and certificates in a temporary directory):
what each kind of certificate may do, private modes, issuing kept while good and done again
when not, refusals, and one line per fault found in a certificate. The certificates at work
against real etcd and Placement: tests/compute/test_host_credentials.py, tests/cluster."""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from etcd_compute import pki as pki_module
from etcd_compute.errors import ConfigError
from etcd_compute.pki import (
    COMPUTE,
    CONSOLE_PROXY,
    CONSOLE_PROXY_UNIT,
    CONSOLE_RELAY,
    ETCD_MEMBER,
    KINDS,
    OPERATOR,
    PLACEMENT,
    ROOT,
    SERVICE,
    Pki,
    certificate_problems,
    common_name,
    compute_name,
    load_certificate,
)

SERVER, CLIENT = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    pki = Pki(tmp_path / "pki")
    assert pki.init()
    return pki


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def shift_clock(monkeypatch: pytest.MonkeyPatch, **delta: float) -> None:
    now = pki_module._now() + datetime.timedelta(**delta)
    monkeypatch.setattr(pki_module, "_now", lambda: now)


# -- the CA ----------------------------------------------------------------------------------


def test_the_ca_is_made_once_and_kept(tmp_path):
    pki = Pki(tmp_path / "a" / "pki")
    assert pki.init(cluster="prod")
    first = pki.ca_cert.read_bytes(), pki.ca_key.read_bytes()
    assert not pki.init(cluster="prod")
    assert (pki.ca_cert.read_bytes(), pki.ca_key.read_bytes()) == first
    ca = load_certificate(pki.ca_cert)
    assert common_name(ca) == "prod CA"
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    ca.verify_directly_issued_by(ca)
    assert ca.not_valid_after_utc - ca.not_valid_before_utc > datetime.timedelta(days=3649)


@pytest.mark.parametrize("umask", [0, 0o077])
def test_modes_are_set_whatever_the_umask_or_a_killed_run_left(tmp_path, umask):
    pki = Pki(tmp_path / "pki")
    pki.directory.mkdir(mode=0o755)
    left = pki.key("op").with_name("op.key.partial")  # a killed run's, readable by all
    left.write_text("")
    os.chmod(left, 0o666)
    old = os.umask(umask)
    try:
        pki.init()
        issued = pki.issue("op", OPERATOR)
    finally:
        os.umask(old)
    assert mode(pki.directory) == 0o700
    assert (mode(pki.ca_key), mode(issued.key)) == (0o600, 0o600)
    assert (mode(pki.ca_cert), mode(issued.cert)) == (0o644, 0o644)
    assert not list(pki.directory.glob("*.partial"))


def test_nothing_is_issued_without_a_ca(tmp_path):
    pki = Pki(tmp_path / "empty")
    with pytest.raises(ConfigError, match=r"^no CA in .*empty; create it first \(pki init\)$"):
        pki.issue("op", OPERATOR)
    assert not pki.directory.exists()


# -- what is issued --------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "usages"), [
    (ETCD_MEMBER, [SERVER, CLIENT]), (PLACEMENT, [SERVER]), (SERVICE, [SERVER]),
    (COMPUTE, [CLIENT]), (OPERATOR, [CLIENT]), (ROOT, [CLIENT]), (CONSOLE_RELAY, [SERVER]),
    (CONSOLE_PROXY, [CLIENT])])
def test_each_kind_may_do_what_it_is_for_and_nothing_more(pki, kind, usages):
    issued = pki.issue("holder", kind)
    certificate = load_certificate(issued.cert)
    assert common_name(certificate) == "holder"  # the etcd user of a client certificate
    assert list(certificate.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) \
        == usages
    assert not certificate.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    certificate.verify_directly_issued_by(load_certificate(pki.ca_cert))
    assert pki.problems(issued.cert, issued.key) == []


def test_addresses_and_names_it_serves_on_are_in_the_certificate(pki):
    issued = pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.2", "::1", "10.0.0.1"],
                       dns=["etcd-1.example", "localhost"])
    names = load_certificate(issued.cert).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert sorted(str(ip) for ip in names.get_values_for_type(x509.IPAddress)) == [
        "10.0.0.1", "10.0.0.2", "::1"]
    assert sorted(names.get_values_for_type(x509.DNSName)) == ["etcd-1.example", "localhost"]
    client = load_certificate(pki.issue("op", OPERATOR).cert)
    with pytest.raises(x509.ExtensionNotFound):
        client.extensions.get_extension_for_class(x509.SubjectAlternativeName)


def test_a_certificate_lasts_the_days_asked(pki):
    certificate = load_certificate(pki.issue("short", OPERATOR, days=40).cert)
    lasts = certificate.not_valid_after_utc - pki_module._now()
    assert datetime.timedelta(days=39) < lasts <= datetime.timedelta(days=40)


def test_a_host_is_named_by_its_provider_uuid():
    assert compute_name("0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a10") == \
        "compute-0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a10"


# -- issuing again ---------------------------------------------------------------------------


def test_a_good_certificate_is_kept(pki):
    first = pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.1"], dns=["e1"])
    files = first.cert.read_bytes(), first.key.read_bytes()
    again = pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.1"], dns=["e1"])
    assert (first.created, again.created) == (True, False)
    assert (again.cert.read_bytes(), again.key.read_bytes()) == files


def reissued(pki: Pki, name: str, kind: str = OPERATOR, **kwargs) -> bool:
    before = pki.cert(name).read_bytes()
    issued = pki.issue(name, kind, **kwargs)
    changed = pki.cert(name).read_bytes() != before
    assert issued.created == changed
    assert pki.problems(issued.cert, issued.key) == []
    return changed


def test_renew_issues_again(pki):
    pki.issue("op", OPERATOR)
    assert reissued(pki, "op", renew=True)


def test_other_addresses_are_issued_again(pki):
    pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.1"])
    assert reissued(pki, "etcd-1", ETCD_MEMBER, ips=["10.0.0.1", "10.0.0.9"])
    assert reissued(pki, "etcd-1", ETCD_MEMBER, ips=["10.0.0.1", "10.0.0.9"], dns=["e1"])
    assert not reissued(pki, "etcd-1", ETCD_MEMBER, ips=["10.0.0.9", "10.0.0.1"], dns=["e1"])


def test_one_that_ends_within_30_days_is_issued_again(pki):
    pki.issue("op", OPERATOR, days=29)
    assert reissued(pki, "op")


def test_one_from_another_ca_or_with_another_key_is_issued_again(pki, tmp_path):
    other = Pki(tmp_path / "other")
    other.init()
    other.issue("op", OPERATOR)
    pki.issue("op", OPERATOR)
    for suffix in (".crt", ".key"):
        (pki.directory / f"op{suffix}").write_bytes((other.directory / f"op{suffix}")
                                                    .read_bytes())
    assert reissued(pki, "op")
    pki.key("op").write_bytes(pki.ca_key.read_bytes())  # a key, not the certificate's
    os.chmod(pki.key("op"), 0o644)
    assert reissued(pki, "op")
    assert mode(pki.key("op")) == 0o600  # replaced whole, mode and all


@pytest.mark.parametrize("name", ["", "a/b", "../ca", ".hidden", "/etc/passwd"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(pki, name):
    listed = sorted(pki.directory.iterdir())
    with pytest.raises(ConfigError, match="a plain name is needed"):
        pki.issue(name, OPERATOR)
    assert sorted(pki.directory.iterdir()) == listed


def test_an_unknown_kind_is_refused_naming_the_kinds(pki):
    with pytest.raises(ConfigError) as raised:
        pki.issue("op", "admin")
    assert str(raised.value) == f"unknown certificate kind 'admin'; one of {', '.join(KINDS)}"
    assert not pki.cert("op").exists()


# -- faults found in a certificate -----------------------------------------------------------


def test_an_unreadable_certificate_is_one_line(pki):
    missing = pki.directory / "missing.crt"
    assert pki.problems(missing) == [
        f"{missing}: not a readable PEM certificate (FileNotFoundError)"]
    garbage = pki.directory / "garbage.crt"
    garbage.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n")
    assert pki.problems(garbage) == [f"{garbage}: not a readable PEM certificate (ValueError)"]
    with pytest.raises(ConfigError, match="not a readable PEM certificate"):
        load_certificate(garbage)


def test_time_faults(pki, monkeypatch):
    issued = pki.issue("op", OPERATOR, days=365)
    until = load_certificate(issued.cert).not_valid_after_utc
    shift_clock(monkeypatch, days=340)
    assert pki.problems(issued.cert) == [f"{issued.cert}: expires on {until:%Y-%m-%d}"]
    shift_clock(monkeypatch, days=30)
    assert pki.problems(issued.cert) == [f"{issued.cert}: expired on {until:%Y-%m-%d}"]
    monkeypatch.undo()
    shift_clock(monkeypatch, hours=-1)
    [fault] = pki.problems(issued.cert)
    assert fault.startswith(f"{issued.cert}: not valid before ")


def test_a_certificate_of_another_ca_is_named(pki, tmp_path):
    other = Pki(tmp_path / "other")
    other.init()
    issued = other.issue("op", OPERATOR)
    [fault] = pki.problems(issued.cert, issued.key)
    assert fault.startswith(f"{issued.cert}: not signed by the CA in {pki.ca_cert} (")


def test_key_faults(pki):
    issued = pki.issue("op", OPERATOR)
    other = pki.issue("other", OPERATOR)
    assert pki.problems(issued.cert, other.key) == [f"{other.key}: does not match {issued.cert}"]
    broken = pki.directory / "broken.key"
    broken.write_text("not a key")
    assert pki.problems(issued.cert, broken) == [
        f"{broken}: not a readable PEM private key (ValueError)"]


def test_address_and_name_faults_say_what_is_there_and_what_was_wanted(pki):
    issued = pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.1"], dns=["e1"])
    assert certificate_problems(issued.cert, None, pki.ca_cert, want_ips=["10.0.0.2"],
                                want_dns=["e1", "e2"]) == [
        f"{issued.cert}: addresses ['10.0.0.1'], wanted ['10.0.0.2']",
        f"{issued.cert}: names ['e1'], wanted ['e1', 'e2']"]
    client = pki.issue("op", OPERATOR)
    assert pki.problems(client.cert, want_ips=["10.0.0.1"]) == [
        f"{client.cert}: addresses [], wanted ['10.0.0.1']"]


def test_several_faults_are_one_line_each(pki, tmp_path, monkeypatch):
    other = Pki(tmp_path / "other")
    other.init()
    issued = other.issue("op", OPERATOR, days=31)
    shift_clock(monkeypatch, days=2)
    faults = pki.problems(issued.cert, pki.ca_key, want_ips=["10.0.0.1"])
    assert len(faults) == 4 and all("\n" not in fault for fault in faults)
    assert [fault.split(": ", 1)[1].split(" ", 2)[:2] for fault in faults] == [
        ["not", "signed"], ["expires", "on"], ["does", "not"], ["addresses", "[],"]]


def test_a_certificate_without_a_common_name_has_an_empty_one():
    key = ec.generate_private_key(ec.SECP256R1())
    now = pki_module._now()
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "no cn")])
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(1).not_valid_before(now)
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    assert common_name(certificate) == ""


# -- a hypervisor's libvirt certificates -----------------------------------------------------


def test_a_host_s_libvirt_certificates_in_libvirt_s_and_qemu_s_layouts(pki, tmp_path):
    target = pki.issue_libvirt("hv1", tmp_path / "libvirt", ips=["10.0.0.1"],
                               qemu_group=os.getgid())
    libvirt_files = {p.name for p in target.iterdir() if p.is_file()}
    assert libvirt_files == set(pki_module.LIBVIRT_LAYOUT.values())
    assert {p.name for p in (target / "qemu").iterdir()} == set(
        pki_module.QEMU_LAYOUT.values())
    for layout, where in ((pki_module.LIBVIRT_LAYOUT, target),
                          (pki_module.QEMU_LAYOUT, target / "qemu")):
        assert (where / layout["ca"]).read_bytes() == pki.ca_cert.read_bytes()
        assert (where / layout["server-cert"]).read_bytes() == \
            pki.cert("libvirt-server-hv1").read_bytes()
    # libvirt's keys are root's; qemu's are its group's to read; nothing is listable.
    assert mode(target / "serverkey.pem") == 0o600 and mode(target / "clientkey.pem") == 0o600
    assert mode(target / "qemu" / "server-key.pem") == 0o640
    assert (target / "qemu" / "server-key.pem").stat().st_gid == os.getgid()
    assert mode(target) == 0o711 and mode(target / "qemu") == 0o711


def test_the_server_certificate_names_the_host_and_its_addresses(pki, tmp_path):
    pki.issue_libvirt("hv1", tmp_path / "l", ips=["10.0.0.1"], dns=["hv1.example"])
    server = load_certificate(pki.cert("libvirt-server-hv1"))
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(names.get_values_for_type(x509.DNSName)) == ["hv1", "hv1.example"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.0.0.1"]
    assert list(server.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [SERVER]


def test_only_libvirt_client_certificates_carry_the_unit_libvirtd_admits(pki, tmp_path):
    pki.issue_libvirt("hv1", tmp_path / "l", ips=["10.0.0.1"])
    client = load_certificate(pki.cert("libvirt-client-hv1"))
    assert client.subject.rfc4514_string() == "CN=libvirt-client-hv1,OU=libvirt"
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == \
        [CLIENT]
    # A host's etcd identity or an operator's does not open a libvirtd.
    for kind in (COMPUTE, OPERATOR):
        other = load_certificate(pki.issue(f"someone-{kind}", kind).cert)
        assert not other.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
    assert pki_module.LIBVIRT_ALLOWED_DN == "OU=libvirt,CN=*"


def test_a_controller_gets_a_client_certificate_only_and_a_server_needs_an_address(pki,
                                                                                   tmp_path):
    target = pki.issue_libvirt("controller", tmp_path / "c", client_only=True)
    assert {p.name for p in target.iterdir() if p.is_file()} == {
        "cacert.pem", "clientcert.pem", "clientkey.pem"}
    assert not pki.cert("libvirt-server-controller").exists()
    assert mode(target) == 0o700
    with pytest.raises(ConfigError, match="give its address"):
        pki.issue_libvirt("hv2", tmp_path / "h")


def test_only_the_console_proxys_certificate_carries_its_unit(pki):
    from cryptography.x509.oid import NameOID

    def units(kind: str) -> list[str]:
        certificate = load_certificate(pki.issue(f"u-{kind}", kind).cert)
        return [a.value for a in
                certificate.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)]

    assert units(CONSOLE_PROXY) == [CONSOLE_PROXY_UNIT]
    assert all(CONSOLE_PROXY_UNIT not in units(kind) for kind in (COMPUTE, OPERATOR,
                                                                   CONSOLE_RELAY))
