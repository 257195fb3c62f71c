"""Who this compute host is in Placement: a uuid that survives restarts."""

from __future__ import annotations

import json
import uuid as uuidlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HostIdentity:
    uuid: str
    name: str


def load_identity(config: dict[str, Any]) -> HostIdentity:
    """`compute.uuid` from config, else one generated once and kept in state_dir."""
    compute = config["compute"]
    if compute["uuid"]:
        return HostIdentity(compute["uuid"], compute["name"])
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
