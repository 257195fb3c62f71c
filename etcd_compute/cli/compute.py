"""compute.py / ecompute: the compute daemon for one hypervisor host."""

from __future__ import annotations

import argparse
import sys

from etcd_compute import config as configuration
from etcd_compute import logs
from etcd_compute.cli import Parser, terminal_line
from etcd_compute.errors import EtcdComputeError


def build_parser() -> Parser:
    """compute.py's parser (docs/reference/cli.md is generated from it)."""
    parser = Parser(
        prog="compute.py",
        description="Register this host in Placement, watch etcd, build and destroy instances.",
    )
    parser.add_argument("--config", metavar="PATH",
                        help="compute.yaml to use (default: ./compute.yaml if present)")
    parser.add_argument("--check", action="store_true",
                        help="validate the config and reach etcd, Placement and the driver, "
                             "then exit")
    parser.add_argument("--fake-hosts", type=int, metavar="N", default=0,
                        help="simulate N hosts in this process (fake driver; for benchmarks)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        config = configuration.load_compute(args.config)
        if args.fake_hosts:
            if args.fake_hosts < 0:
                raise configuration.ConfigError("--fake-hosts must be positive")
            config["driver"]["name"] = "fake"
        logs.setup(args.log_level or config["logging"]["level"])
        # Imported late: `--help` and config errors stay fast and need no grpc.
        from etcd_compute.compute.check import check
        from etcd_compute.compute.identity import fake_identities, load_identity
        from etcd_compute.compute.service import ComputeService

        if args.check:
            for line in check(config):
                print(line)
            return 0
        identity = load_identity(config)
        hosts = fake_identities(identity, args.fake_hosts) if args.fake_hosts else [identity]
        return ComputeService(config, hosts).run()
    except EtcdComputeError as exc:
        print(f"compute.py: error: {terminal_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
