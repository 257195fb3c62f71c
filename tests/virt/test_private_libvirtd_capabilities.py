"""A private libvirtd (tools/local_services/private_libvirt.py, every hypervisor host of
the tests) leaves what it probed of the machine's qemu binaries in the machine's cache,
and the next one starts from that instead of probing again (7.5 s of a host's start here).
A cached file libvirt finds stale is probed again, as without the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import libvirt
import pytest

from tests.support import unavailable
from tools.local_services.netns import TestNetwork, netns_usable
from tools.local_services.private_libvirt import CAPABILITIES, PrivateLibvirtd


@pytest.fixture
def netns() -> Iterator[str]:
    why = netns_usable()
    if why:
        unavailable(why)
    net = TestNetwork.create()
    try:
        yield net.add_host("caps").netns
    finally:
        net.delete()


def probed_times(directory: Path) -> dict[str, int]:
    """Capability files by when they were probed (a copy keeps its file's time)."""
    return {path.name: path.stat().st_mtime_ns for path in directory.glob("*.xml")}


def run_libvirtd(root: Path, netns: str) -> dict[str, int]:
    """A libvirtd on `root` asked for the machine's capabilities: what its cache holds."""
    daemon = PrivateLibvirtd(root, netns).start()
    try:
        connection = libvirt.open(daemon.uri)
        try:
            assert "<guest>" in connection.getCapabilities()
        finally:
            connection.close()
        return probed_times(root / CAPABILITIES)
    finally:
        daemon.stop()


def test_a_private_libvirtd_starts_from_what_the_last_one_probed(tmp_path, monkeypatch, netns):
    monkeypatch.setenv("ETCD_COMPUTE_CACHE", str(tmp_path / "cache"))
    shared = tmp_path / "cache" / "libvirt-capabilities"
    first = run_libvirtd(tmp_path / "first", netns)
    assert first, "the first libvirtd probed nothing"
    assert probed_times(shared) == first

    # Nothing probed again: every file is the one the first probed.
    assert run_libvirtd(tmp_path / "second", netns) == first

    # A stale file (its qemu binary's time another) is probed again, and the cache takes it.
    stale = next(path for path in shared.glob("*.xml") if "<qemuctime>" in path.read_text())
    text = stale.read_text()
    start = text.index("<qemuctime>") + len("<qemuctime>")
    stale.write_text(text[:start] + "9" + text[start:])
    third = run_libvirtd(tmp_path / "third", netns)
    assert third.keys() == first.keys() and third[stale.name] != first[stale.name]
    assert "<qemuctime>9" not in stale.read_text()
    assert probed_times(shared) == third
