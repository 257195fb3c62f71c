"""Files sent to a peer host through its libvirtd's storage API (over the same TLS).

    sent = send_file(peer, Path("/var/lib/etcd-compute/instances/<uuid>"), "config.iso",
                     local_path)          # -> Sent(name, size, sha256)

The only channel between hypervisors is libvirt over TLS with the cluster's
certificates (no SSH keys, no other port): a transient `dir` storage pool on the
peer's directory, a volume per file, `virStorageVol.upload` streaming the bytes.
The pool goes when the copy ends. The receiver checks what arrived against the
size and sha256 the sender reports (`check_received`): a copy cut short, or a
file changed on its way, is refused there, never used.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import libvirt

CHUNK = 1 << 20
POOL_PREFIX = "etcd-compute-in-"


@dataclass(frozen=True)
class Sent:
    name: str
    size: int
    sha256: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _pool_xml(name: str, directory: Path) -> str:
    pool = ET.Element("pool", type="dir")
    ET.SubElement(pool, "name").text = name
    ET.SubElement(ET.SubElement(pool, "target"), "path").text = str(directory)
    return ET.tostring(pool, encoding="unicode")


def _volume_xml(name: str, size: int) -> str:
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", unit="bytes").text = str(size)
    ET.SubElement(volume, "allocation", unit="bytes").text = "0"
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", type="raw")  # the bytes as they are (a qcow2 too)
    permissions = ET.SubElement(target, "permissions")
    ET.SubElement(permissions, "mode").text = "0600"  # tenant data, from the first byte
    return ET.tostring(volume, encoding="unicode")


def _open_pool(peer: libvirt.virConnect, name: str, directory: Path) -> libvirt.virStoragePool:
    """A transient pool on `directory` (an earlier attempt's, left behind, replaced)."""
    try:
        stale = peer.storagePoolLookupByName(name)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_POOL:
            raise
    else:
        if stale.isActive():
            stale.destroy()
        if stale.isPersistent():
            stale.undefine()
    return peer.storagePoolCreateXML(_pool_xml(name, directory), 0)


def send_files(peer: libvirt.virConnect, directory: Path, files: dict[str, Path],
               pool_name: str) -> list[Sent]:
    """Copy each local file to `directory/<name>` on the peer (which exists there),
    replacing what is there; the size and sha256 of each, as read while sending."""
    pool = _open_pool(peer, POOL_PREFIX + pool_name, directory)
    try:
        return [_send(peer, pool, name, path) for name, path in files.items()]
    finally:
        try:
            pool.destroy()
        except libvirt.libvirtError:
            pass  # the peer went away: its pool was transient


def _send(peer: libvirt.virConnect, pool: libvirt.virStoragePool, name: str,
          path: Path) -> Sent:
    if "/" in name or name.startswith("."):
        raise ValueError(f"not a plain file name: {name!r}")
    try:
        pool.storageVolLookupByName(name).delete(0)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() != libvirt.VIR_ERR_NO_STORAGE_VOL:
            raise
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(0)
        volume = pool.createXML(_volume_xml(name, size), 0)
        stream = peer.newStream(0)
        try:
            volume.upload(stream, 0, size, 0)

            def read(_stream: Any, nbytes: int, _opaque: Any) -> bytes:
                chunk = handle.read(min(nbytes, CHUNK))
                digest.update(chunk)
                return chunk

            stream.sendAll(read, None)
            stream.finish()
        except BaseException:
            try:
                stream.abort()
            except libvirt.libvirtError:
                pass
            raise
    return Sent(name, size, digest.hexdigest())


def check_received(directory: Path, sent: list[dict[str, Any]]) -> None:
    """Every file the sender reports is here, whole: ValueError naming the first that
    is not."""
    for entry in sent:
        name = entry.get("name")
        if not isinstance(name, str) or "/" in name or name.startswith("."):
            raise ValueError(f"not a plain file name: {name!r}")
        path = directory / name
        if not path.is_file():
            raise ValueError(f"{name}: not received")
        if path.stat().st_size != entry.get("size") or sha256_of(path) != entry.get("sha256"):
            raise ValueError(f"{name}: received {path.stat().st_size} bytes that do not match "
                             "what was sent (a copy cut short?)")
