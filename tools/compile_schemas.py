#!/usr/bin/env python3
"""Generate etcd_compute/schemas/compiled/<name>.py from every schema (run after changing one).

A short-lived command (schedule.py) validates its config and a few messages: generating each
validator at start cost it ~20 ms a schema; importing the generated module costs ~0.1 ms.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from etcd_compute.schemas import _files, compiled_source  # noqa: E402

OUT = REPO / "etcd_compute" / "schemas" / "compiled"


def main() -> int:
    names = sorted(name.removesuffix(".json") for name in _files())
    for name in names:
        if name == "common":
            continue  # only definitions, referred to by the others
        (OUT / f"{name}.py").write_text(compiled_source(name))
    print(f"wrote {len(names) - 1} validators to {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
