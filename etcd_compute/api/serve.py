"""`schedule.py api`: the compute API under gunicorn, as Placement runs.

Workers (`api.workers`) each with a few threads (`api.threads`), every worker its own
etcd and Placement clients, made after the fork. TLS with the API's certificate
(`api.cert`, `api.key`; clients verify it with the cluster CA, they present none: they
authenticate with Keystone tokens). Nothing is kept between requests but caches, so
several API processes, on one machine or several, serve side by side.
"""

from __future__ import annotations

import logging
import os
import traceback
from pathlib import Path
from typing import Any

from etcd_compute import config as configuration
from etcd_compute.errors import ConfigError

LOG = logging.getLogger(__name__)


def listen_address(listen: str) -> tuple[str, int]:
    """(host, port) of `api.listen` (`HOST:PORT`, an IP address): ConfigError otherwise."""
    return configuration.ip_port(listen, "api.listen")


def gunicorn_options(config: dict[str, Any]) -> dict[str, Any]:
    """gunicorn's settings for `config`'s `api` section (checked: ConfigError)."""
    api = config["api"]
    host, port = listen_address(api["listen"])
    bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    options: dict[str, Any] = {
        "bind": [bind], "workers": api["workers"], "threads": api["threads"],
        "worker_class": "gthread" if api["threads"] > 1 else "sync",
        # A create may wait for the scheduler service as long as `schedule.py --wait`.
        "timeout": int(config["scheduler"]["wait_timeout_seconds"]) + 30,
        "graceful_timeout": 30, "control_socket_disable": True,
        # gthread's 2 s keep-alive equals openstacksdk's wait_for_server poll: a poll sent
        # on a connection as the server closed it failed (RemoteDisconnected, under load).
        "keepalive": 75,
        "accesslog": "-", "errorlog": "-", "loglevel": config["logging"]["level"].lower(),
        "proc_name": "etcd-compute-api",
    }
    if bool(api["cert"]) != bool(api["key"]):
        raise ConfigError("api.cert and api.key go together")
    for setting in ("cert", "key"):
        if api[setting] and not Path(api[setting]).is_file():
            raise ConfigError(f"api.{setting} {api[setting]}: no such file")
    if api["cert"]:
        options.update(certfile=api["cert"], keyfile=api["key"])
    if not api["keystone_authtoken"]:
        raise ConfigError("api.keystone_authtoken: required (the service user that "
                          "validates tokens: auth_url, username, password, ...)")
    return options


def check_policy(policy_file: str | None) -> None:
    """ConfigError (one line) if the policy file is bad, found now rather than at a worker's
    first request. Checked in a forked child: gunicorn's master, which lives as long as the
    API, then never holds oslo.policy and oslo.config (~11 MB its workers load for
    themselves)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: no threads run yet in the master it was forked from
        status = 0
        try:
            os.close(read)
            from etcd_compute.api.policy import Policy

            Policy(policy_file)
        except ConfigError as exc:
            os.write(write, str(exc).encode()[:4096])
            status = 1
        except BaseException:  # noqa: BLE001 (whatever it is, the master says so in one line)
            traceback.print_exc()
            status = 2
        finally:
            os._exit(status)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        message = pipe.read().decode(errors="replace")
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    if code == 1:
        raise ConfigError(message)
    if code != 0:
        raise ConfigError(f"api.policy_file {policy_file}: checking the rules failed "
                          f"(exit status {code})")


def serve(config: dict[str, Any]) -> int:
    """Run the API until SIGTERM or SIGINT (gunicorn's arbiter); the exit status."""
    from gunicorn.app.base import BaseApplication

    options = gunicorn_options(config)
    check_policy(config["api"]["policy_file"])  # a bad policy file is one line now, not a 500

    class Application(BaseApplication):  # type: ignore[misc]
        def load_config(self) -> None:
            for name, value in options.items():
                self.cfg.set(name, value)

        def load(self) -> Any:
            from etcd_compute.api.app import make_app

            return make_app(config)

    LOG.info("compute API on %s://%s (%d workers x %d threads)",
             "https" if config["api"]["cert"] else "http", options["bind"][0],
             options["workers"], options["threads"])
    Application().run()
    return 0
