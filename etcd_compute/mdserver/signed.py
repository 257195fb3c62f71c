"""Who is asking, through Neutron's metadata agent: a request signed for an instance.

With `network.backend: neutron` a guest reaches 169.254.169.254 in its network's
`ovnmeta-<network>` namespace on its host, where Neutron's OVN metadata agent proxies the
request to us (`mode = signed` in mdserver.conf) as it does to Nova's metadata API, with
X-Instance-ID (the guest's port's device_id), X-Tenant-ID (the port's project),
X-Forwarded-For (the guest's address) and X-Instance-ID-Signature: the HMAC-SHA256 of the
instance id keyed with the secret the agent and we share (`metadata_proxy_shared_secret`;
our `shared_secret_file`).

Every header may be forged by whoever reaches our socket, so the signature is checked first
(hmac.compare_digest) and a request without a good one is refused (403) before anything is
read. Then, as in lease mode, the instance must be ours on this host: the id an instance uuid
(it becomes a path), the domain of that name on this hypervisor ours and running, its
meta.json present; anything else gets nothing (404). X-Tenant-ID is not compared: Nova's API
compares it with the instance's project, but meta.json holds only what the guest may learn,
no project (the signature, as Nova's, covers the instance id alone).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import stat
from typing import Any

import libvirt

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver.addresses import ipv4_or_empty
from etcd_compute.mdserver.resolver import InstanceResolver
from etcd_compute.mdserver.settings import MdserverConfig
from etcd_compute.virt.domain import is_ours
from etcd_compute.virt.instance_files import InstanceFiles

log = logging.getLogger("etcd_compute.mdserver")

MAX_SECRET_BYTES = 4096


class Forbidden(Exception):
    """A request without a good signature: refused before anything is read."""

    status = "403 Forbidden"


def signature(secret: bytes, instance_id: str) -> str:
    """X-Instance-ID-Signature of `instance_id`, as Neutron's metadata agent makes it."""
    return hmac.new(secret, instance_id.encode("utf-8"), hashlib.sha256).hexdigest()


def read_secret(path: str) -> bytes:
    """The shared secret: the file's content without its line end. ConfigError unless it is a
    regular file (no symlink) that only its owner may read or write, and not empty."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"mdserver.shared_secret_file {path}: cannot read: "
                          f"{exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(handle.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise ConfigError(f"mdserver.shared_secret_file {path}: not a regular file")
        if status.st_mode & 0o077:
            raise ConfigError(f"mdserver.shared_secret_file {path}: readable by others than "
                              f"its owner (mode {status.st_mode & 0o777:o}; make it 0600)")
        secret = handle.read(MAX_SECRET_BYTES + 1).rstrip(b"\r\n")
    if not secret:
        raise ConfigError(f"mdserver.shared_secret_file {path}: is empty")
    if len(secret) > MAX_SECRET_BYTES:
        raise ConfigError(f"mdserver.shared_secret_file {path}: more than "
                          f"{MAX_SECRET_BYTES} bytes")
    return secret


def signed_instance_id(environ: dict[str, Any], secret: bytes) -> str:
    """The request's X-Instance-ID if X-Instance-ID-Signature is its signature; Forbidden
    otherwise. Reads nothing but the two headers."""
    instance_id = environ.get("HTTP_X_INSTANCE_ID") or ""
    given = environ.get("HTTP_X_INSTANCE_ID_SIGNATURE") or ""
    if not instance_id or not given:
        raise Forbidden("no X-Instance-ID or no X-Instance-ID-Signature")
    expected = signature(secret, instance_id).encode("ascii")
    # WSGI gives header values as latin-1 text: compare the bytes that came, in constant time.
    if not hmac.compare_digest(expected, given.encode("latin-1", errors="replace")):
        raise Forbidden("X-Instance-ID-Signature is not X-Instance-ID's")
    return instance_id


class SignedResolver:
    """A signed request -> the meta.json of the instance it names (Forbidden without a good
    signature)."""

    def __init__(self, config: MdserverConfig, secret: bytes):
        self.config = config
        self.secret = secret
        self.libvirt = InstanceResolver(config)  # its libvirt connection, opened on demand

    def meta_for_request(self, environ: dict[str, Any]) -> dict[str, Any] | None:
        instance_id = signed_instance_id(environ, self.secret)
        try:
            files = InstanceFiles.of(self.config.instances_dir, instance_id)
        except ValueError:
            log.warning("a signed request names %r, not an instance uuid", instance_id[:64])
            return None
        if not self.runs_here_as_ours(instance_id):
            return None
        return files.read_meta()

    def address_for_request(self, environ: dict[str, Any]) -> str:
        """The guest's address as the agent names it (X-Forwarded-For, one IPv4 address;
        "" otherwise): the agent found the instance it signs by this address."""
        return ipv4_or_empty(environ.get("HTTP_X_FORWARDED_FOR") or "")

    def runs_here_as_ours(self, uuid: str) -> bool:
        """Whether the domain named `uuid` on this hypervisor is ours and running."""
        try:
            domain = self.libvirt.connection.lookupByName(uuid)
            return is_ours(domain) and bool(domain.isActive())
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_DOMAIN:
                log.warning("lookup of %s failed: %s", uuid, exc.get_error_message())
            return False
