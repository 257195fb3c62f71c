"""python -m tools.local_services up|down|status [--plain] [--network neutron|libvirt]
[--run-dir run]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from etcd_compute.errors import EtcdComputeError
from tools.local_services.process import REPO
from tools.local_services.stack import LocalStack


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "status"])
    parser.add_argument("--run-dir", default=str(REPO / "run"))
    parser.add_argument("--etcd-port", type=int, default=2379)
    parser.add_argument("--placement-port", type=int, default=8080)
    parser.add_argument("--keystone-port", type=int, default=5000)
    parser.add_argument("--glance-port", type=int, default=9292)
    parser.add_argument("--api-port", type=int, default=8774)
    parser.add_argument("--console-port", type=int, default=6080)
    parser.add_argument("--dashboard-port", type=int, default=8443,
                        help="Horizon's port on 127.0.0.1 (0: no dashboard)")
    parser.add_argument("--plain", action="store_true",
                        help="plain TCP, no certificates or RBAC (quick experiments)")
    parser.add_argument("--network", choices=["neutron", "libvirt"], default="neutron",
                        help="the guests' network: Neutron on OVN with a host in a network "
                             "namespace and an outside one (default), or the machine's "
                             "libvirt NAT network (the seed's shape, for schedule.py alone)")
    parser.add_argument("--neutron-workers", type=int, default=None,
                        help="Neutron's API workers (default: one per core, at most 4)")
    args = parser.parse_args(argv)
    stack = LocalStack.load(Path(args.run_dir).resolve())

    def say(line: str) -> None:
        print(f"==> {line}", flush=True)

    try:
        if args.action == "up":
            stack.up(args.etcd_port, args.placement_port, say, plain=args.plain,
                     keystone_port=args.keystone_port, glance_port=args.glance_port,
                     api_port=args.api_port, console_port=args.console_port,
                     dashboard_port=args.dashboard_port, network_backend=args.network,
                     neutron_workers=args.neutron_workers)
        elif args.action == "down":
            stack.down(say)
        else:
            for line in stack.status():
                print(line)
    except EtcdComputeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


sys.exit(main())
