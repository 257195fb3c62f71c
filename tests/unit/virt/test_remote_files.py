"""virt/remote_files.py: what is sent through a peer's storage API (a stand-in for the peer's
libvirtd: libvirt's test driver has no volume upload), what the pool's life is, and the
receiver's check of what arrived. Over real libvirtds and TLS: tests/virt/test_migration_vm.py."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.virt import remote_files
from etcd_compute.virt.remote_files import Sent, check_received, send_files


def libvirt_error(code: int) -> libvirt.libvirtError:
    error = libvirt.libvirtError("stand-in")
    error.err = (code, 0, "stand-in", 0, "", "", "", 0, 0)
    return error


class Stream:
    def __init__(self, peer: Peer):
        self.peer, self.volume = peer, None

    def sendAll(self, handler: Any, opaque: Any) -> None:  # noqa: N802 (libvirt's names)
        while chunk := handler(self, 1 << 16, opaque):
            self.volume.data += chunk
            if self.peer.fail_after is not None and len(self.volume.data) >= self.peer.fail_after:
                raise libvirt_error(libvirt.VIR_ERR_SYSTEM_ERROR)

    def finish(self) -> None:
        self.peer.events.append(("finish", self.volume.name))

    def abort(self) -> None:
        self.peer.events.append(("abort", self.volume.name))


class Volume:
    def __init__(self, pool: Pool, name: str, xml: str):
        self.pool, self.name, self.xml, self.data = pool, name, xml, b""

    def upload(self, stream: Stream, offset: int, length: int, flags: int) -> None:
        stream.volume = self
        self.pool.peer.events.append(("upload", self.name, offset, length))

    def delete(self, flags: int) -> None:
        del self.pool.volumes[self.name]
        self.pool.peer.events.append(("delete", self.name))


class Pool:
    def __init__(self, peer: Peer, xml: str):
        self.peer, self.xml, self.volumes = peer, xml, dict(peer.existing)
        self.active = True

    def storageVolLookupByName(self, name: str) -> Volume:  # noqa: N802
        if name not in self.volumes:
            raise libvirt_error(libvirt.VIR_ERR_NO_STORAGE_VOL)
        return Volume(self, name, "")

    def createXML(self, xml: str, flags: int) -> Volume:  # noqa: N802
        name = ET.fromstring(xml).findtext("name")
        self.volumes[name] = volume = Volume(self, name, xml)
        self.peer.volumes[name] = volume
        return volume

    def destroy(self) -> None:
        self.active = False
        self.peer.events.append(("pool destroyed",))

    def isActive(self) -> bool:  # noqa: N802
        return self.active

    def isPersistent(self) -> bool:  # noqa: N802
        return False


class Peer:
    def __init__(self, stale: bool = False, existing: tuple[str, ...] = (),
                 fail_after: int | None = None):
        self.existing = {name: None for name in existing}
        self.fail_after = fail_after
        self.events: list[tuple[Any, ...]] = []
        self.stale = Pool(self, "<pool/>") if stale else None
        self.pools: list[Pool] = []
        self.volumes: dict[str, Volume] = {}

    def storagePoolLookupByName(self, name: str) -> Pool:  # noqa: N802
        if self.stale is None:
            raise libvirt_error(libvirt.VIR_ERR_NO_STORAGE_POOL)
        return self.stale

    def storagePoolCreateXML(self, xml: str, flags: int) -> Pool:  # noqa: N802
        pool = Pool(self, xml)
        self.pools.append(pool)
        return pool

    def newStream(self, flags: int) -> Stream:  # noqa: N802
        return Stream(self)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    disk, drive = tmp_path / "disk.qcow2", tmp_path / "config.iso"
    disk.write_bytes(b"QFI\xfb" + bytes(range(256)) * 1000)
    drive.write_bytes(b"cidata" * 10)
    return {"disk.qcow2": disk, "config.iso": drive}


def test_each_file_is_streamed_into_a_transient_pool_on_the_peer_s_directory(files):
    peer = Peer()
    sent = send_files(peer, Path("/srv/instances/x"), files, pool_name="x")
    assert [s.name for s in sent] == ["disk.qcow2", "config.iso"]
    for entry in sent:
        data = files[entry.name].read_bytes()
        assert peer.volumes[entry.name].data == data
        assert entry == Sent(entry.name, len(data), hashlib.sha256(data).hexdigest())
        volume = ET.fromstring(peer.volumes[entry.name].xml)
        assert volume.findtext("capacity") == str(len(data))
        assert volume.findtext("target/permissions/mode") == "0600"
    pool = ET.fromstring(peer.pools[0].xml)
    assert pool.get("type") == "dir" and pool.findtext("target/path") == "/srv/instances/x"
    assert pool.findtext("name") == f"{remote_files.POOL_PREFIX}x"
    assert peer.events[-1] == ("pool destroyed",) and not peer.pools[0].active


def test_a_stale_pool_and_an_old_copy_of_a_file_are_replaced(files):
    peer = Peer(stale=True, existing=("config.iso",))
    send_files(peer, Path("/srv/x"), {"config.iso": files["config.iso"]}, pool_name="x")
    assert peer.events[0] == ("pool destroyed",)  # the stale one
    assert ("delete", "config.iso") in peer.events


def test_a_copy_cut_short_aborts_its_stream_and_still_ends_the_pool(files):
    peer = Peer(fail_after=1000)
    with pytest.raises(libvirt.libvirtError):
        send_files(peer, Path("/srv/x"), files, pool_name="x")
    assert ("abort", "disk.qcow2") in peer.events
    assert peer.events[-1] == ("pool destroyed",)


@pytest.mark.parametrize("name", ["../etc/passwd", ".hidden", "a/b"])
def test_a_name_that_is_not_a_plain_file_name_is_refused(files, name):
    with pytest.raises(ValueError, match="plain file name"):
        send_files(Peer(), Path("/srv/x"), {name: files["config.iso"]}, pool_name="x")


def test_what_arrived_whole_is_accepted(tmp_path):
    (tmp_path / "config.iso").write_bytes(b"abc")
    check_received(tmp_path, [Sent("config.iso", 3, hashlib.sha256(b"abc").hexdigest())
                              .to_dict()])


@pytest.mark.parametrize("entry, error", [
    ({"name": "config.iso", "size": 4, "sha256": hashlib.sha256(b"abcd").hexdigest()},
     "do not match"),
    ({"name": "config.iso", "size": 3, "sha256": hashlib.sha256(b"abd").hexdigest()},
     "do not match"),
    ({"name": "disk.qcow2", "size": 3, "sha256": "0" * 64}, "not received"),
    ({"name": "../config.iso", "size": 3, "sha256": "0" * 64}, "plain file name"),
    ({"name": None, "size": 3, "sha256": "0" * 64}, "plain file name"),
])
def test_what_arrived_short_changed_or_not_at_all_is_refused(tmp_path, entry, error):
    (tmp_path / "config.iso").write_bytes(b"abc")
    with pytest.raises(ValueError, match=error):
        check_received(tmp_path, [entry])
