"""configdrive.py: the NoCloud config drive (ISO 9660 labelled cidata, Rock Ridge and Joliet
names), tenant data private from its first byte, read back with pycdlib."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pycdlib
import yaml

from etcd_compute.virt import configdrive


def test_config_drive_contents(tmp_path: Path) -> None:
    iso = tmp_path / "config.iso"
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 someone@example"
    configdrive.write_config_drive(iso, "abc-123", "my-host", "#cloud-config\nfoo: 1\n", key)
    assert stat.S_IMODE(iso.stat().st_mode) == 0o600  # user-data and key: tenant data
    files = configdrive.read_config_drive(iso)
    assert set(files) == {"meta-data", "user-data"}
    meta = yaml.safe_load(files["meta-data"])
    assert meta == {"instance-id": "abc-123", "local-hostname": "my-host", "public-keys": [key]}
    assert files["user-data"] == "#cloud-config\nfoo: 1\n"

    reader = pycdlib.PyCdlib()
    reader.open(str(iso))
    try:
        assert reader.pvd.volume_identifier.decode().strip() == "cidata"
        assert reader.has_rock_ridge() and reader.has_joliet()
    finally:
        reader.close()


def test_the_drive_is_private_before_its_first_byte(tmp_path: Path, monkeypatch) -> None:
    modes = []
    write_fp = pycdlib.PyCdlib.write_fp

    def watched(iso: pycdlib.PyCdlib, handle, *args, **kwargs) -> None:
        modes.append(stat.S_IMODE(os.fstat(handle.fileno()).st_mode))
        write_fp(iso, handle, *args, **kwargs)

    monkeypatch.setattr(pycdlib.PyCdlib, "write_fp", watched)
    old = os.umask(0)  # whatever the umask: never group or world readable
    try:
        configdrive.write_config_drive(tmp_path / "config.iso", "abc", "h", "secret", None)
    finally:
        os.umask(old)
    assert modes == [0o600]


def test_config_drive_without_key_or_user_data(tmp_path: Path) -> None:
    iso = tmp_path / "config.iso"
    configdrive.write_config_drive(iso, "abc", "h", None, None)
    files = configdrive.read_config_drive(iso)
    assert yaml.safe_load(files["meta-data"]) == {"instance-id": "abc", "local-hostname": "h"}
    assert files["user-data"] == ""


def test_meta_data_is_yaml_whatever_the_strings_hold() -> None:
    """A hostname or key that looks like YAML stays a string (no injected keys)."""
    hostile_key = "ssh-rsa AAAA x\ninstance-id: other\n"
    text = configdrive.meta_data("abc", "yes: no", hostile_key)
    assert yaml.safe_load(text) == {"instance-id": "abc", "local-hostname": "yes: no",
                                    "public-keys": [hostile_key.strip()]}


def test_a_second_write_replaces_the_first_and_leaves_no_partial_file(tmp_path: Path) -> None:
    iso = tmp_path / "config.iso"
    configdrive.write_config_drive(iso, "abc", "h", "first", None)
    configdrive.write_config_drive(iso, "abc", "h", "second", None)
    assert configdrive.read_config_drive(iso)["user-data"] == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["config.iso"]
