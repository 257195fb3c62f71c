"""Boot overhead (placeholder until the libvirt part lands)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_boot(run_dir: Path, runs: int) -> dict[str, Any]:
    return {"skipped": "not implemented yet"}
