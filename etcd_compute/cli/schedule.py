"""schedule.py / eschedule: place instances, and look after them.

    schedule.py QUERY [--count N] [--wait] ...   place instances (the `place` command)
    schedule.py UUID                 state, host, IP, resources, error (`show`)
    schedule.py COMMAND ... [options]            see `schedule.py --help`, and
                                                 `schedule.py COMMAND --help`

A first word that is not a command is a query if it contains '=' (resources=...),
else an instance uuid, as in the seed's `schedule.py 'resources=...'` and
`schedule.py UUID`. Each command has its own options (`schedule.py stop --help`);
--config and --log-level go with every command, before or after its word. The
handlers live by noun: cli/instances.py (place, show, destroy, list), cli/console.py,
cli/actions.py (stop ... resize, events), cli/hosts.py (hosts, host ...), cli/zones.py
(zone ...); `serve` (the controller) and `api` (the compute API) here; what they print,
cli/output.py.

Exit status: 0 done, 1 no valid host / not found / instance failed / action refused in
its state / no room to resize / action ended in error, 2 bad input or config, 3 etcd or
Placement unreachable.
"""

from __future__ import annotations

import argparse
from typing import Any

from etcd_compute import config as configuration
from etcd_compute import logs
from etcd_compute.cli import CommandParser, Commands, Parser, output
from etcd_compute.cli import actions as actions_cli
from etcd_compute.cli import console as console_cli
from etcd_compute.cli import hosts as hosts_cli
from etcd_compute.cli import images as images_cli
from etcd_compute.cli import instances as instances_cli
from etcd_compute.cli import zones as zones_cli
from etcd_compute.errors import EtcdComputeError, UsageError
from etcd_compute.keys import UUID

# What a first word that is no command means.
QUERY_COMMAND, UUID_COMMAND = "place", "show"
EXAMPLES = """\
examples:
  schedule.py 'resources=VCPU:1,MEMORY_MB:512,DISK_GB:1' --wait
  schedule.py 'resources=VCPU:1,MEMORY_MB:256&required=!CUSTOM_SLOW' --count 3 \\
      --hint anti-affinity=web
  schedule.py 'resources=VCPU:1,MEMORY_MB:256' --zone <aggregate uuid>
  schedule.py 'resources=VCPU:1,MEMORY_MB:256' --count 20 --zone lab2
  schedule.py zone add lab2 --etcd 10.1.0.1:2379 --placement https://10.1.0.1:8080 \\
      --ca-cert lab2/ca.crt --cert lab2/operator.crt --cert-key lab2/operator.key
  schedule.py zone list
  schedule.py d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py destroy d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py stop d578fb7c-7787-4e73-b69a-a7b3ef9bf73a --wait
  schedule.py resize 'resources=VCPU:2,MEMORY_MB:1024,DISK_GB:2' d578fb7c-... --wait
  schedule.py events d578fb7c-7787-4e73-b69a-a7b3ef9bf73a
  schedule.py list --host hv1 --state error
  schedule.py console d578fb7c-7787-4e73-b69a-a7b3ef9bf73a --follow

A first word that is no command is a query if it contains '=' (as `place QUERY`), else
an instance uuid (as `show UUID`). `schedule.py COMMAND --help` shows a command's options.
Exit status: 0 done, 1 no valid host / not found / failed / refused, 2 bad input or
config, 3 etcd or Placement unreachable.
"""


def build_parser() -> tuple[Parser, dict[str, CommandParser]]:
    """schedule.py's parser, and every command's parser by its path ("stop", "zone add")."""
    # No defaults here (parse_args sets them once): a command under a command (`host
    # drain`) would otherwise reset what was given before its word.
    common = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument("--config", metavar="PATH",
                        help="schedule.yaml to use (default: ./schedule.yaml if present)")
    common.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser = Parser(
        prog="schedule.py", parents=[common],
        usage="schedule.py [--config PATH] (QUERY | UUID | COMMAND ...) [options]",
        description="Schedule instances onto compute hosts via Placement and etcd; "
                    "show, list, act on and destroy them.",
        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", prog="schedule.py",
                                       parser_class=CommandParser, title="commands")
    every: dict[str, CommandParser] = {}
    commands = Commands(subparsers, common, every)
    instances_cli.add_commands(commands)
    console_cli.add_commands(commands)
    actions_cli.add_commands(commands)
    hosts_cli.add_commands(commands)
    commands.add("serve", "the controller (leader-elected): reschedules failed builds, "
                          "recovers the instances of dead hosts, runs the scheduler service",
                 words="takes no arguments", handler=cmd_serve, json=False)
    commands.add("api", "the compute API (Nova's v2.1 behind Keystone, under gunicorn; "
                        "see etcd_compute/api/)",
                 words="takes no arguments", handler=cmd_api, json=False)
    commands.add("console-proxy", "the console proxy (noVNC and websockify: a guest's screen "
                                  "for a console token; see etcd_compute/console_proxy.py)",
                 words="takes no arguments", handler=cmd_console_proxy, json=False)
    zones_cli.add_commands(commands)
    images_cli.add_commands(commands)
    return parser, every


def cmd_serve(_args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.controller.serve import ControllerService

    return ControllerService(config).run()


# The commands that run until stopped: they log what they do.
DAEMONS = ("serve", "api", "console-proxy")


def cmd_console_proxy(_args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.console_proxy import serve

    return serve(config)


def cmd_api(_args: argparse.Namespace, config: dict[str, Any]) -> int:
    from etcd_compute.api.serve import serve

    return serve(config)


def _valued(every: dict[str, CommandParser]) -> set[str]:
    """Every option string that takes a value (--count N), in any command."""
    return {option for parser in every.values() for action in parser._actions
            if action.nargs != 0 for option in action.option_strings}


def _first_word(argv: list[str], valued: set[str]) -> int | None:
    """Where the first word that is no option (nor an option's value) is, if any."""
    index = 0
    while index < len(argv):
        word = argv[index]
        if word == "--":
            return index + 1 if index + 1 < len(argv) else None
        if not word.startswith("-") or word == "-":
            return index
        index += 2 if word in valued else 1
    return None


def _goes_with(option: str, every: dict[str, CommandParser]) -> str | None:
    """`--hard goes with reboot`: where an option given to another command belongs."""
    paths = [path for path, parser in every.items()
             if option in parser._option_string_actions and option not in ("-h", "--help")]
    if not paths:
        return None
    action = every[paths[0]]._option_string_actions[option]
    name = max(action.option_strings, key=len)
    places = ["a query" if path == QUERY_COMMAND else path for path in paths]
    where = places[0] if len(places) == 1 else ", ".join(places[:-1]) + " or " + places[-1]
    return f"{name} goes with {where}"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command and its options. The command's word goes first whatever came before
    it (`schedule.py --count 3 QUERY` as before); a word that is no command is a query
    (with '=') or a uuid."""
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    parser, every = build_parser()
    at = _first_word(argv, _valued(every))
    if at is None:
        parser.parse_args(argv)  # --help, or an unknown option
        raise UsageError("nothing to do: give a query (resources=...), an instance uuid, or "
                         "a command (" + ", ".join(sorted(_top(every))) + "); see --help")
    word = argv[at]
    implicit = word not in _top(every)
    command = (QUERY_COMMAND if "=" in word else UUID_COMMAND) if implicit else word
    if implicit and command == UUID_COMMAND and not UUID.match(word):
        raise UsageError(f"{word!r} is not a query (resources=...), an instance uuid, or one "
                         "of " + ", ".join(p for p in _top(every)
                                           if p not in (QUERY_COMMAND, UUID_COMMAND)))
    rest = argv[:at] + argv[at + (0 if implicit else 1):]
    args, extras = parser.parse_known_args(
        [command, *rest], argparse.Namespace(implicit=implicit, config=None, log_level=None))
    if extras:
        raise UsageError(_extras_fault(args, extras, every))
    return args


def _top(every: dict[str, CommandParser]) -> list[str]:
    return [path for path in every if " " not in path]


def _extras_fault(args: argparse.Namespace, extras: list[str],
                  every: dict[str, CommandParser]) -> str:
    """One line for what the command did not take: an option of another command, an
    unknown option, or a word too many."""
    options = [extra for extra in extras if extra.startswith("-") and extra != "-"]
    if options:
        option = options[0].split("=", 1)[0]
        return _goes_with(option, every) or f"unrecognized arguments: {options[0]}"
    path = args.command if getattr(args, "action", None) is None \
        else f"{args.command} {args.action}"
    if path == QUERY_COMMAND:
        return (f"unexpected argument {extras[0]!r} (quote the query; join its parts "
                "with &)")
    return f"{path}: {every[path].words or f'unexpected argument {extras[0]!r}'}"


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        config = configuration.load_schedule(args.config)
        # A daemon reports what it does; a command only what went wrong.
        default_level = "INFO" if args.command in DAEMONS else config["logging"]["level"]
        logs.setup(args.log_level or default_level)
        return args.handler(args, config)
    except EtcdComputeError as exc:
        output.error(str(exc))
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
