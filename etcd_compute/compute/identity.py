"""Who this compute host is in Placement: a uuid that survives restarts."""

from __future__ import annotations

import json
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from etcd_compute.errors import ConfigError
from etcd_compute.keys import UUID
from etcd_compute.pki import COMPUTE_PREFIX, common_name, load_certificate


@dataclass(frozen=True)
class HostIdentity:
    uuid: str
    name: str


def certificate_uuid(config: dict[str, Any]) -> str | None:
    """The provider uuid named by our etcd certificate (CN compute-<uuid>), if there is one."""
    path = config["etcd"].get("cert")
    if not path:
        return None
    name = common_name(load_certificate(Path(path)))
    uuid = name.removeprefix(COMPUTE_PREFIX)
    return uuid if name.startswith(COMPUTE_PREFIX) and UUID.match(uuid) else None


def load_identity(config: dict[str, Any]) -> HostIdentity:
    """`compute.uuid` from config; else the uuid our certificate was issued for (a host's
    identity is its certificate); else one generated once and kept in state_dir.

    ConfigError when config and certificate name different hosts: etcd would refuse
    every write of ours.
    """
    compute = config["compute"]
    from_certificate = certificate_uuid(config)
    if compute["uuid"]:
        if from_certificate and from_certificate != compute["uuid"]:
            raise ConfigError(
                f"etcd.cert {config['etcd']['cert']} is for host {from_certificate}, but "
                f"compute.uuid is {compute['uuid']}; issue one for this host "
                "(cluster.py host add) or drop compute.uuid")
        return HostIdentity(compute["uuid"], compute["name"])
    if from_certificate:
        return HostIdentity(from_certificate, compute["name"])
    state_file = Path(compute["state_dir"]) / "identity.json"
    if state_file.exists():
        saved = json.loads(state_file.read_text())
        return HostIdentity(saved["uuid"], compute["name"])
    state_file.parent.mkdir(parents=True, exist_ok=True)
    identity = HostIdentity(str(uuidlib.uuid4()), compute["name"])
    tmp = state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"uuid": identity.uuid}))
    tmp.replace(state_file)
    return identity


def fake_identities(base: HostIdentity, count: int) -> list[HostIdentity]:
    """`count` simulated hosts derived from `base`: stable across restarts."""
    namespace = uuidlib.UUID(base.uuid)
    return [
        HostIdentity(str(uuidlib.uuid5(namespace, f"fake-{i}")), f"{base.name}-fake-{i:04d}")
        for i in range(count)
    ]
