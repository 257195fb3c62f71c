"""cluster.py / ecluster: the cluster's certificates and etcd's users and roles.

    cluster.py pki init                                  the CA (kept if it exists)
    cluster.py pki issue etcd-member NAME --ip IP ...    a member's certificate
    cluster.py pki issue placement NAME --ip IP ...      Placement's certificate
    cluster.py pki issue operator NAME                   an operator's (CN = etcd user)
    cluster.py pki issue-libvirt HOST --ip IP [--dir D]  a hypervisor's libvirtd: server
                                                         and client, libvirt's and qemu's
                                                         layouts (docs/how-to/operators/
                                                         certificates.md)
    cluster.py pki list                                  what was issued, and until when
    cluster.py etcd setup [--operator NAME ...]          root, the operator role, auth on
    cluster.py host add NAME [--uuid UUID]               a compute host: certificate
                                                         (CN compute-<uuid>) and etcd role
    cluster.py host remove UUID                          its etcd user and role go

Certificates go to --pki (default /etc/etcd-compute/pki, or the directory of
the configured etcd.ca_cert). `etcd` and `host` talk to etcd as `root`, with
the endpoints and prefix of --config (a schedule.yaml) and root's certificate.
Every command is idempotent.
"""

from __future__ import annotations

import argparse
import sys
import uuid as uuidlib
from pathlib import Path
from typing import Any

from etcd_compute import config as configuration
from etcd_compute.cli import Parser, terminal_line
from etcd_compute.errors import EtcdComputeError, UsageError
from etcd_compute.keys import UUID

DEFAULT_PKI = "/etc/etcd-compute/pki"
# The group Debian's libvirt runs qemu as (qemu reads the migration stream's keys itself).
QEMU_GROUP = "libvirt-qemu"


def build_parser() -> Parser:
    """cluster.py's parser (docs/reference/cli.md is generated from it)."""
    parser = Parser(prog="cluster.py", description=__doc__.splitlines()[0],
                    epilog=__doc__.split("\n\n")[1],
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pki", metavar="DIR", help=f"certificates (default {DEFAULT_PKI})")
    parser.add_argument("--config", metavar="PATH",
                        help="schedule.yaml with etcd's endpoints and prefix")
    commands = parser.add_subparsers(dest="command", required=True)

    pki = commands.add_parser("pki", help="the cluster CA and its certificates").add_subparsers(
        dest="action", required=True)
    pki.add_parser("init", help="the cluster CA (kept if it exists)")
    issue = pki.add_parser("issue", help="issue a certificate signed by the cluster CA")
    issue.add_argument("kind", choices=["etcd-member", "placement", "service", "operator", "root",
                                        "console-relay", "console-proxy"])
    issue.add_argument("name")
    issue.add_argument("--ip", action="append", default=[], help="an address it serves on")
    issue.add_argument("--dns", action="append", default=[], help="a name it serves as")
    issue.add_argument("--days", type=int, default=365)
    issue.add_argument("--renew", action="store_true", help="issue again even if still good")
    libvirt = pki.add_parser("issue-libvirt",
                             help="a hypervisor's libvirtd certificates (TLS between peers)")
    libvirt.add_argument("host", help="the hypervisor's name (and its certificates')")
    libvirt.add_argument("--ip", action="append", default=[],
                         help="the address its peers reach its libvirtd at")
    libvirt.add_argument("--dns", action="append", default=[], help="a name it is reached by")
    libvirt.add_argument("--dir", metavar="DIR",
                         help="where to write them (default PKI/libvirt/HOST); copy it to the "
                              "host's driver.libvirt.migration.pki_dir")
    libvirt.add_argument("--client-only", action="store_true",
                         help="a client certificate only (a controller that fences)")
    libvirt.add_argument("--qemu-group", default=QEMU_GROUP, metavar="GROUP",
                         help=f"the group qemu runs as, given read access to qemu's keys "
                              f"(default {QEMU_GROUP}; 'none': keep them root's only)")
    libvirt.add_argument("--renew", action="store_true", help="issue again even if still good")
    pki.add_parser("list", help="what was issued, and until when")

    etcd = commands.add_parser("etcd", help="etcd's users and roles").add_subparsers(
        dest="action", required=True)
    setup = etcd.add_parser("setup", help="root, the operator role, auth on")
    setup.add_argument("--operator", action="append", default=[], metavar="NAME",
                       help="an operator to issue a certificate for and give the operator role")

    host = commands.add_parser("host", help="a compute host's etcd user and role").add_subparsers(
        dest="action", required=True)
    add = host.add_parser("add",
                          help="a compute host: certificate (CN compute-<uuid>) and etcd role")
    add.add_argument("name", help="the host's name (informative; the uuid is its identity)")
    add.add_argument("--uuid", help="its resource provider uuid (default: a new one)")
    remove = host.add_parser("remove", help="its etcd user and role go")
    remove.add_argument("uuid", help="the host's resource provider uuid")
    return parser


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def _pki_dir(args: argparse.Namespace, config: dict[str, Any] | None) -> Path:
    if args.pki:
        return Path(args.pki)
    if config and config["etcd"].get("ca_cert"):
        return Path(config["etcd"]["ca_cert"]).parent
    return Path(DEFAULT_PKI)


def _root_store(args: argparse.Namespace, config: dict[str, Any], pki: Any) -> Any:
    """etcd as `root` (etcd's user administrator), with root's certificate."""
    from etcd_compute.etcd import Store
    from etcd_compute.pki import ROOT

    issued = pki.issue("root", ROOT)
    return Store({**config["etcd"], "ca_cert": str(pki.ca_cert), "cert": str(issued.cert),
                  "key": str(issued.key), "user": None, "password": None})


def _group(name: str) -> int | None:
    if name == "none":
        return None
    import grp

    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise UsageError(f"--qemu-group {terminal_line(name)}: no such group here (is "
                         "libvirt installed? 'none' keeps qemu's keys root's)") from None


def run(args: argparse.Namespace) -> int:
    from etcd_compute.pki import COMPUTE, Pki, common_name, compute_name, load_certificate

    config = configuration.load_schedule(args.config) if args.config or \
        Path("schedule.yaml").exists() else None
    pki = Pki(_pki_dir(args, config))
    if args.command == "pki":
        if args.action == "init":
            created = pki.init()
            print(f"{'created' if created else 'kept'} CA {pki.ca_cert}")
        elif args.action == "issue":
            issued = pki.issue(args.name, args.kind, ips=args.ip, dns=args.dns, days=args.days,
                               renew=args.renew)
            print(f"{'issued' if issued.created else 'kept'} {issued.cert} {issued.key}")
        elif args.action == "issue-libvirt":
            directory = Path(args.dir) if args.dir else pki.directory / "libvirt" / args.host
            written = pki.issue_libvirt(args.host, directory, ips=args.ip, dns=args.dns,
                                        client_only=args.client_only,
                                        qemu_group=_group(args.qemu_group), renew=args.renew)
            print(f"libvirt certificates of {terminal_line(args.host)} in {written} "
                  f"(qemu's in {written / 'qemu'})")
        else:
            for cert in sorted(pki.directory.glob("*.crt")):
                certificate = load_certificate(cert)
                problems = pki.problems(cert) if cert != pki.ca_cert else []
                print(f"{common_name(certificate):<44} until "
                      f"{certificate.not_valid_after_utc:%Y-%m-%d}  "
                      f"{'; '.join(problems) or 'ok'}")
        return 0
    if config is None:
        raise UsageError(f"{args.command}: give --config (a schedule.yaml naming etcd)")
    from etcd_compute.etcd_auth import EtcdAuth

    with _root_store(args, config, pki) as store:
        auth = EtcdAuth(store)
        if args.command == "etcd":
            auth.setup(args.operator)
            for name in args.operator:
                pki.issue(name, "operator")
            print(f"etcd auth on; operators: {', '.join(args.operator) or '(none yet)'}")
        elif args.action == "add":
            rp_uuid = args.uuid or str(uuidlib.uuid4())
            if not UUID.match(rp_uuid):
                raise UsageError(f"--uuid {terminal_line(rp_uuid)}: not a uuid")
            issued = pki.issue(compute_name(rp_uuid), COMPUTE)
            auth.add_host(rp_uuid)
            print(f"host {terminal_line(args.name)}: uuid {rp_uuid}")
            print(f"  etcd.ca_cert: {pki.ca_cert}\n  etcd.cert: {issued.cert}\n"
                  f"  etcd.key: {issued.key}\n  (the same three for placement:)")
        else:
            if not UUID.match(args.uuid):
                raise UsageError(f"{terminal_line(args.uuid)}: not a uuid")
            auth.remove_host(args.uuid)
            print(f"host {args.uuid}: etcd user and role removed")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        return run(parse_args(argv))
    except EtcdComputeError as exc:
        print(f"cluster.py: error: {terminal_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
