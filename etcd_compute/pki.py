"""One PKI for the cluster: a CA, and certificates for etcd members, Placement, hosts, operators.

    pki = Pki(Path("/etc/etcd-compute/pki"))
    pki.init()                                     # ca.crt, ca.key (kept if there)
    pki.issue("etcd-1", ETCD_MEMBER, ips=["10.0.0.1"])
    pki.issue(compute_name(rp_uuid), COMPUTE)      # CN compute-<uuid>: the etcd user
    pki.issue_libvirt("hv1", Path("/etc/etcd-compute/libvirt-pki"), ips=["10.0.0.1"])

The common name of a client certificate is its etcd user (etcd's
`--client-cert-auth`), so it says who the holder is: `compute-<rp_uuid>` for a
host, the operator's name for an operator, `root` for the one who manages
etcd's users and roles. Keys are EC P-256, written 0600 in a 0700 directory;
certificates 0644. Issuing is idempotent: a valid certificate for the same
name, kind and addresses is kept (`renew=True` replaces it).

A hypervisor's libvirtd talks to the other hosts' over TLS (migration, fencing),
with a server certificate naming the host's address (libvirt checks it against
the URI) and a client certificate whose subject carries `OU=libvirt`: each
libvirtd's `tls_allowed_dn_list` admits exactly those (`LIBVIRT_ALLOWED_DN`),
so a host's etcd identity or an operator's certificate opens no libvirtd.
`issue_libvirt` writes them in the layouts libvirt (`pkipath`, libvirtd.conf)
and qemu (`migrate_tls_x509_cert_dir`: the migration stream) read.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from etcd_compute.errors import ConfigError

# What a certificate is for: etcd members serve clients and talk to each other (both
# ends of TLS); Placement serves; a `service` is another HTTPS server of the cloud
# (Keystone, Glance, the compute API: their clients authenticate with Keystone tokens, not
# certificates); hosts, operators and root are clients.
ETCD_MEMBER, PLACEMENT, SERVICE, COMPUTE, OPERATOR, ROOT = (
    "etcd-member", "placement", "service", "compute", "operator", "root")
# A host's libvirtd serving the other hosts, and the client it (or a controller) is.
LIBVIRT_SERVER, LIBVIRT_CLIENT = "libvirt-server", "libvirt-client"
# A host's console relay serving the console proxy, and the proxy as its client
# (remote_consoles.py): the relay admits only certificates whose subject carries
# `OU=console-proxy`, so no host's, operator's or libvirt's certificate opens a console.
CONSOLE_RELAY, CONSOLE_PROXY = "console-relay", "console-proxy"
KINDS = (ETCD_MEMBER, PLACEMENT, SERVICE, COMPUTE, OPERATOR, ROOT, LIBVIRT_SERVER,
         LIBVIRT_CLIENT, CONSOLE_RELAY, CONSOLE_PROXY)
SERVER_KINDS = (ETCD_MEMBER, PLACEMENT, SERVICE, LIBVIRT_SERVER, CONSOLE_RELAY)
# The organizational unit only libvirt client certificates carry, and the pattern of their
# subject as libvirt (gnutls) prints it, for libvirtd's tls_allowed_dn_list.
LIBVIRT_UNIT = "libvirt"
LIBVIRT_ALLOWED_DN = f"OU={LIBVIRT_UNIT},CN=*"
# The organizational unit only the console proxy's certificates carry.
CONSOLE_PROXY_UNIT = "console-proxy"
# libvirt's file names (pkipath, libvirtd.conf) and qemu's (its x509 cert dir), per role.
LIBVIRT_LAYOUT = {"ca": "cacert.pem", "server-cert": "servercert.pem",
                  "server-key": "serverkey.pem", "client-cert": "clientcert.pem",
                  "client-key": "clientkey.pem"}
QEMU_LAYOUT = {"ca": "ca-cert.pem", "server-cert": "server-cert.pem",
               "server-key": "server-key.pem", "client-cert": "client-cert.pem",
               "client-key": "client-key.pem"}
CA_DAYS = 3650
LEAF_DAYS = 365
# A certificate this close to its end is issued again.
RENEW_BEFORE = datetime.timedelta(days=30)
COMPUTE_PREFIX = "compute-"


def compute_name(rp_uuid: str) -> str:
    """The certificate (and etcd user) name of the host whose provider is `rp_uuid`."""
    return f"{COMPUTE_PREFIX}{rp_uuid}"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write aside and rename: a reader never sees half a key; the mode is set before."""
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(partial, mode)
    partial.replace(path)


def load_certificate(path: Path) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable PEM certificate "
                          f"({exc.__class__.__name__})") from None


def common_name(certificate: x509.Certificate) -> str:
    names = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value) if names else ""


@dataclass(frozen=True)
class Issued:
    name: str
    cert: Path
    key: Path
    created: bool


class Pki:
    """The CA and the certificates it issued, in one directory."""

    def __init__(self, directory: Path | str):
        self.directory = Path(directory)

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    # --- the CA ----------------------------------------------------------------------------

    def init(self, cluster: str = "etcd-compute") -> bool:
        """Create the CA unless it exists; True if it was created now."""
        if self.ca_cert.exists() and self.ca_key.exists():
            return False
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{cluster} CA"),
                          x509.NameAttribute(NameOID.ORGANIZATION_NAME, cluster)])
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .sign(key, hashes.SHA256())
        )
        _write(self.ca_key, _key_pem(key), 0o600)
        _write(self.ca_cert, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        return True

    def _ca(self) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        if not self.ca_cert.exists() or not self.ca_key.exists():
            raise ConfigError(f"no CA in {self.directory}; create it first (pki init)")
        key = serialization.load_pem_private_key(self.ca_key.read_bytes(), password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return load_certificate(self.ca_cert), key

    # --- leaf certificates -------------------------------------------------------------------

    def issue(self, name: str, kind: str, ips: list[str] | None = None,
              dns: list[str] | None = None, days: int = LEAF_DAYS,
              renew: bool = False) -> Issued:
        """A certificate `name` for `kind` (its CN is `name`); kept if it is still good."""
        if kind not in KINDS:
            raise ConfigError(f"unknown certificate kind {kind!r}; one of {', '.join(KINDS)}")
        if not name or "/" in name or name.startswith("."):
            raise ConfigError(f"certificate name {name!r}: a plain name is needed")
        ips, dns = sorted(ips or []), sorted(dns or [])
        cert_path, key_path = self.cert(name), self.key(name)
        if not renew and cert_path.exists() and key_path.exists() and \
                not self.problems(cert_path, key_path, want_ips=ips, want_dns=dns):
            return Issued(name, cert_path, key_path, created=False)
        ca_cert, ca_key = self._ca()
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(_subject(name, kind))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(_usages(kind)), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
        )
        alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if alt_names:
            builder = builder.add_extension(x509.SubjectAlternativeName(alt_names),
                                            critical=False)
        certificate = builder.sign(ca_key, hashes.SHA256())
        _write(key_path, _key_pem(key), 0o600)
        _write(cert_path, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        return Issued(name, cert_path, key_path, created=True)

    def issue_libvirt(self, host: str, directory: Path | str, ips: list[str] | None = None,
                      dns: list[str] | None = None, client_only: bool = False,
                      qemu_group: int | None = None, renew: bool = False) -> Path:
        """`host`'s libvirt certificates (server: its addresses and name in the SAN, unless
        `client_only`, as for a controller that only fences; client: `OU=libvirt`), copied
        into `directory` in libvirt's layout and into `directory/qemu` in qemu's. qemu reads
        its keys as its own user: `qemu_group` (a gid) gets read access to them."""
        if not client_only and not ips and not dns:
            raise ConfigError(f"libvirt server certificate for {host}: give its address "
                              "(--ip) or name (--dns): libvirt checks it against the URI")
        files = {"ca": self.ca_cert}
        client = self.issue(f"libvirt-client-{host}", LIBVIRT_CLIENT, renew=renew)
        files.update({"client-cert": client.cert, "client-key": client.key})
        if not client_only:
            server = self.issue(f"libvirt-server-{host}", LIBVIRT_SERVER, ips=ips,
                                dns=sorted({host, *(dns or [])}), renew=renew)
            files.update({"server-cert": server.cert, "server-key": server.key})
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        # qemu's user traverses to its directory; nothing here is listable but by root.
        os.chmod(target, 0o711 if qemu_group is not None else 0o700)
        for layout, where, group in ((LIBVIRT_LAYOUT, target, None),
                                     (QEMU_LAYOUT, target / "qemu", qemu_group)):
            where.mkdir(parents=True, exist_ok=True)
            if where != target:
                os.chmod(where, 0o711 if group is not None else 0o700)
            for role, source in files.items():
                secret = role.endswith("-key")
                path = where / layout[role]
                _write(path, source.read_bytes(), 0o640 if secret and group is not None
                       else 0o600 if secret else 0o644)
                if secret and group is not None:
                    os.chown(path, -1, group)
        return target

    def problems(self, cert_path: Path, key_path: Path | None = None,
                 want_ips: list[str] | None = None,
                 want_dns: list[str] | None = None) -> list[str]:
        """What is wrong with a certificate of this PKI (empty when it is good)."""
        return certificate_problems(cert_path, key_path, self.ca_cert, want_ips, want_dns)


def certificate_problems(cert_path: Path, key_path: Path | None, ca_path: Path,
                         want_ips: list[str] | None = None,
                         want_dns: list[str] | None = None) -> list[str]:
    """One line per fault: unreadable, not from this CA, expired or expiring, key mismatch,
    missing addresses."""
    try:
        certificate = load_certificate(cert_path)
        ca = load_certificate(ca_path)
    except ConfigError as exc:
        return [str(exc)]
    found = []
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, Exception) as exc:  # noqa: BLE001 (InvalidSignature too)
        found.append(f"{cert_path}: not signed by the CA in {ca_path} "
                     f"({exc.__class__.__name__})")
    now = _now()
    if certificate.not_valid_after_utc <= now:
        found.append(f"{cert_path}: expired on {certificate.not_valid_after_utc:%Y-%m-%d}")
    elif certificate.not_valid_after_utc - now < RENEW_BEFORE:
        found.append(f"{cert_path}: expires on {certificate.not_valid_after_utc:%Y-%m-%d}")
    if certificate.not_valid_before_utc > now:
        found.append(f"{cert_path}: not valid before "
                     f"{certificate.not_valid_before_utc:%Y-%m-%d %H:%M}")
    if key_path is not None:
        try:
            key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError, TypeError) as exc:
            found.append(f"{key_path}: not a readable PEM private key ({exc.__class__.__name__})")
        else:
            if key.public_key().public_bytes(*_PUBLIC) != \
                    certificate.public_key().public_bytes(*_PUBLIC):
                found.append(f"{key_path}: does not match {cert_path}")
    if want_ips is not None or want_dns is not None:
        try:
            names = certificate.extensions.get_extension_for_class(
                x509.SubjectAlternativeName).value
            have_ips = sorted(str(ip) for ip in names.get_values_for_type(x509.IPAddress))
            have_dns = sorted(names.get_values_for_type(x509.DNSName))
        except x509.ExtensionNotFound:
            have_ips, have_dns = [], []
        if want_ips is not None and sorted(want_ips) != have_ips:
            found.append(f"{cert_path}: addresses {have_ips}, wanted {sorted(want_ips)}")
        if want_dns is not None and sorted(want_dns) != have_dns:
            found.append(f"{cert_path}: names {have_dns}, wanted {sorted(want_dns)}")
    return found


_PUBLIC = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _subject(name: str, kind: str) -> x509.Name:
    common = x509.NameAttribute(NameOID.COMMON_NAME, name)
    unit = {LIBVIRT_CLIENT: LIBVIRT_UNIT, CONSOLE_PROXY: CONSOLE_PROXY_UNIT}.get(kind)
    if unit is not None:
        return x509.Name([x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit), common])
    return x509.Name([common])


def _usages(kind: str) -> list[x509.ObjectIdentifier]:
    if kind == ETCD_MEMBER:
        return [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
    if kind in (PLACEMENT, SERVICE, LIBVIRT_SERVER, CONSOLE_RELAY):
        return [ExtendedKeyUsageOID.SERVER_AUTH]
    return [ExtendedKeyUsageOID.CLIENT_AUTH]


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
