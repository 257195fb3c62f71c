"""What the driver's migration tests share: a libvirt driver on the test driver with a
migration address, an image, a target, and stand-ins for the source domain's migration
and for the peer's libvirtd (the test driver migrates nothing)."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import libvirt
import pytest

from etcd_compute.drivers import libvirt_cold_move, libvirt_migration
from etcd_compute.virt.remote_files import Sent
from tests.support import make_spec

RP = "00000000-0000-0000-0000-0000000000aa"
PEER = "10.0.0.2"


def target(instance_dir: str, base: str | None = None) -> dict[str, Any]:
    return {"address": PEER, "instance_dir": instance_dir, "base_sha256": base,
            "dhcp_server": "192.168.123.1", "network": None}


def overlay(backing: str | None) -> bytes:
    """A qcow2 header naming a backing file (at offset 0x200), or none."""
    name = (backing or "").encode()
    header = b"QFI\xfb" + struct.pack(">IQI", 3, 0x200 if name else 0, len(name)) + \
        struct.pack(">IQ", 16, 1 << 30)
    return header.ljust(0x200, b"\0") + name.ljust(4096 - 0x200, b"\0")


class Domain:
    """The source guest: `outcome` is what migrateToURI3 does."""

    def __init__(self, uuid: str, directory: Path = Path("/x"), outcome: str = "moved"):
        self.uuid, self.directory, self.outcome, self.active = uuid, directory, outcome, True
        self.state_now, self.calls = libvirt.VIR_DOMAIN_RUNNING, []

    def name(self) -> str:
        return self.uuid

    def UUIDString(self) -> str:  # noqa: N802
        return self.uuid

    def info(self) -> list[int]:
        return [self.state_now, 131072, 131072, 1, 0]  # 128 MiB

    def blockInfo(self, disk: str) -> list[int]:  # noqa: N802
        return [1 << 30, 5 << 20, 5 << 20]  # 5 MiB written

    def migrateSetMaxDowntime(self, ms: int, flags: int) -> None:  # noqa: N802
        self.calls.append(("downtime", ms))

    def isActive(self) -> bool:  # noqa: N802 (libvirt's names)
        return self.active

    def state(self) -> list[int]:
        return [self.state_now, 0]

    def XMLDesc(self, flags: int) -> str:  # noqa: N802
        return (f"<domain><name>{self.uuid}</name><devices><disk type='file' device='disk'>"
                f"<source file='{self.directory}/disk.qcow2'/><target dev='vda'/></disk>"
                "</devices></domain>")

    def jobStats(self, flags: int = 0) -> dict[str, Any]:  # noqa: N802
        return {"type": libvirt.VIR_DOMAIN_JOB_NONE}

    def migrateToURI3(self, uri: str, params: dict[str, Any], flags: int) -> None:  # noqa: N802
        self.calls.append(("migrate", uri, params, flags))
        if self.outcome == "moved":
            self.active = False
            return
        if self.outcome == "moved-but-failed":
            self.active = False
        error = libvirt.libvirtError("stand-in")
        error.err = (libvirt.VIR_ERR_OPERATION_FAILED, 0, "Lost connection to destination host",
                     0, "", "", "", 0, 0)
        raise error

    def resume(self) -> None:
        self.calls.append(("resume",))

    def create(self) -> None:
        self.active = True
        self.calls.append(("create",))


class Peer:
    def __init__(self, there: Domain | None = None):
        self.there, self.closed = there, False

    def lookupByUUIDString(self, uuid: str) -> Domain:  # noqa: N802
        if self.there is None:
            raise libvirt.libvirtError("no domain")
        return self.there

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def moving(driver, test_driver_config, image, monkeypatch):
    """A built guest whose domain (as the driver sees it) and peer are stand-ins."""
    spec = make_spec(RP, image)
    driver.build(spec)
    uuid = spec["uuid"]
    directory = Path(test_driver_config["compute"]["instances_dir"]) / uuid
    (directory / "disk.qcow2").write_bytes(overlay(None))
    sent: list[dict[str, Path]] = []
    state: dict[str, Any] = {"domain": Domain(uuid, directory), "peer": Peer()}
    monkeypatch.setattr(driver, "_domain", lambda _uuid: state["domain"])
    monkeypatch.setattr(driver, "_our_domain",
                        lambda asked: state["domain"] if asked == uuid else None)
    monkeypatch.setattr(driver, "_open_peer", lambda _target: state["peer"])
    monkeypatch.setattr(driver, "_watched", lambda domain: (None, domain))
    def send(peer: Any, directory: Path, files: dict[str, Path], pool_name: str) -> list[Sent]:
        sent.append(files)
        return [Sent(name, path.stat().st_size, "0" * 64) for name, path in files.items()]

    for module in (libvirt_migration, libvirt_cold_move):
        monkeypatch.setattr(module, "send_files", send)
    state.update(uuid=uuid, sent=sent, spec=spec)
    return state


