"""A fence agent for a fake-driver host, as the controller runs one (`scheduler.fencing.command`):
`fence_agent.py HOST_CONFIG NAME`. As an IPMI agent powers a machine off, it halts every
guest of the host whose config it is given, and exits 0; it refuses (exit 2) a host it was
not made for. tests/compute/test_fence_command.py runs it."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import yaml  # noqa: E402

from etcd_compute.drivers.fake import FakeDriver  # noqa: E402


def main(argv: list[str]) -> int:
    config_path, name = argv
    config = yaml.safe_load(Path(config_path).read_text())
    if config["compute"]["name"] != name:
        print(f"this agent powers off {config['compute']['name']}, not {name}", file=sys.stderr)
        return 2
    halted = FakeDriver(config).fence()
    print(f"powered off ({len(halted)} guest(s) halted)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
