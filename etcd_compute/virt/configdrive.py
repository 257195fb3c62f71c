"""The NoCloud config drive: an ISO 9660 image labelled `cidata`.

cloud-init's NoCloud datasource (and CirrOS) read `meta-data` (YAML:
instance-id, local-hostname, public-keys) and `user-data` from any filesystem
labelled cidata. Rock Ridge and Joliet carry the lowercase, hyphenated names;
the plain ISO 9660 names underneath are only 8.3 placeholders.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pycdlib
import yaml

VOLUME_ID = "cidata"


def meta_data(instance_id: str, hostname: str, ssh_key: str | None) -> str:
    data: dict[str, object] = {"instance-id": instance_id, "local-hostname": hostname}
    if ssh_key:
        data["public-keys"] = [ssh_key.strip()]
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=False)


def write_config_drive(
    path: Path,
    instance_id: str,
    hostname: str,
    user_data: str | None,
    ssh_key: str | None,
) -> None:
    """Write the ISO to `path` (replacing any earlier one)."""
    files = {
        "meta-data": meta_data(instance_id, hostname, ssh_key).encode(),
        "user-data": (user_data or "").encode(),
    }
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, vol_ident=VOLUME_ID, joliet=3, rock_ridge="1.09")
    for number, (name, content) in enumerate(files.items()):
        iso.add_fp(
            io.BytesIO(content),
            len(content),
            f"/FILE{number}.;1",
            rr_name=name,
            joliet_path=f"/{name}",
        )
    partial = path.with_suffix(".partial")
    # Tenant data (user-data, key): readable by its owner only from the first byte on.
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            iso.write_fp(handle)
    finally:
        iso.close()
    os.chmod(partial, 0o600)
    partial.rename(path)


def read_config_drive(path: Path) -> dict[str, str]:
    """Name -> content of every file on a config drive (tests and debugging)."""
    iso = pycdlib.PyCdlib()
    iso.open(str(path))
    try:
        files = {}
        for child in iso.list_children(rr_path="/"):
            if child.is_dot() or child.is_dotdot():
                continue
            name = child.rock_ridge.name().decode()
            out = io.BytesIO()
            iso.get_file_from_iso_fp(out, rr_path=f"/{name}")
            files[name] = out.getvalue().decode()
        return files
    finally:
        iso.close()
