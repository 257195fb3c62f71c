"""The test guest's reading of the config drive's public keys (tools/build-test-guest.sh,
`configdrive_keys` in its /etc/guest-functions), run by this machine's busybox on the
meta-data our config drive writes: the key pair's public key, whole, however PyYAML
folded or quoted it; none for an instance without one."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from etcd_compute.virt.configdrive import meta_data

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGm1ZtN3mVg9Hn7E6y6l0PqO5c9b7cX0p0Q1r2s3t4u5"
# 4096-bit RSA: one long word, no fold inside it.
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAACAQ" + "Ce3uWyitSc7a0teGhi71XIIoQ5Mtke" * 23 + "=="


@pytest.fixture(scope="module")
def guest_functions(guest_root: Path) -> Path:
    return guest_root / "etc" / "guest-functions"


def keys_read(guest_functions: Path, tmp_path: Path, key: str | None) -> list[str]:
    drive = tmp_path / "meta-data"
    drive.write_text(meta_data("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f", "guest", key))
    done = subprocess.run(["busybox", "sh", "-c", '. "$1" && configdrive_keys "$2"', "_",
                           str(guest_functions), str(drive)],
                          capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


@pytest.mark.parametrize("key", [
    ED25519,
    f"{ED25519} alice@laptop",
    # Past PyYAML's 80 columns: folded onto a second, indented line.
    f"{ED25519} bob@laptop with a long comment that goes on and on",
    f"{RSA} carol@example.org",
    # Quoted (": " and " #" would mean something else plain), with '' for a quote.
    f"{ED25519} it's: a # comment",
])
def test_the_guest_reads_the_key_pairs_public_key_whole(guest_functions: Path,
                                                        tmp_path: Path, key: str) -> None:
    assert keys_read(guest_functions, tmp_path, key) == [key]


def test_an_instance_without_a_key_pair_gives_the_guest_no_key(guest_functions: Path,
                                                                tmp_path: Path) -> None:
    assert keys_read(guest_functions, tmp_path, None) == []
