"""python -m tools.local_services up|down|status [--run-dir run]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import REPO, pid_alive
from tools.local_services.stack import LocalStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--run-dir", default=str(REPO / "run"))
    parser.add_argument("--etcd-port", type=int, default=2379)
    parser.add_argument("--placement-port", type=int, default=8080)
    args = parser.parse_args(argv)
    stack = LocalStack.load(Path(args.run_dir).resolve())

    def say(line: str) -> None:
        print(f"==> {line}", flush=True)

    try:
        if args.action == "up":
            stack.up(args.etcd_port, args.placement_port, say)
        elif args.action == "down":
            stack.down(say)
        else:
            for name in ("etcd", "placement"):
                state = getattr(stack, name)
                alive = bool(state and pid_alive(state["pid"]))
                where = f"pid {state['pid']}, port {state['port']}" if state else "never started"
                print(f"{name}: {'running' if alive else 'stopped'} ({where})")
    except ServiceUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


sys.exit(main())
