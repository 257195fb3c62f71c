"""`compute.py --check`: is the config valid, are our certificates good, is everything reachable?"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from etcd_compute import network_backend
from etcd_compute.compute.identity import load_identity
from etcd_compute.compute.metrics import checked_listen
from etcd_compute.drivers import load_driver
from etcd_compute.errors import ConfigError
from etcd_compute.etcd import Store
from etcd_compute.neutron import NeutronClient
from etcd_compute.pki import certificate_problems
from etcd_compute.placement import PlacementClient


def certificates(config: dict[str, Any]) -> list[str]:
    """One line per section whose certificate is good; ConfigError (one line) on the first
    fault: unreadable, not from the configured CA, expired, key not matching, or a CN that
    names another host."""
    lines = []
    for section in ("etcd", "placement"):
        settings = config[section]
        if not settings.get("cert"):
            continue
        if not settings.get("ca_cert"):
            raise ConfigError(f"{section}.cert needs {section}.ca_cert")
        problems = certificate_problems(Path(settings["cert"]), Path(settings["key"] or ""),
                                        Path(settings["ca_cert"]))
        if problems:
            raise ConfigError(f"{section}: {problems[0]}")
        lines.append(f"{section} certificate: ok ({settings['cert']})")
    identity = load_identity(config)  # a certificate issued for another host is refused here
    lines.append(f"identity: {identity.uuid}")
    return lines


def check(config: dict[str, Any]) -> list[str]:
    """One line per thing that is good; raises on the first that is not."""
    lines = ["config: ok", *certificates(config)]
    store = Store(config["etcd"])
    try:
        with store.errors():
            status = store.client.status()
        lines.append(f"etcd: ok (version {status.version}, {', '.join(store.endpoints)})")
    finally:
        store.close()
    lines.append(f"placement: ok ({PlacementClient(config['placement']).check()})")
    if network_backend.uses_neutron(config):
        neutron = NeutronClient(config["network"]["neutron"])
        seen = len(neutron.networks(fields="id"))
        lines.append(f"neutron: ok ({neutron.endpoint}, {seen} network(s); guests plugged "
                     f"into {config['network']['neutron']['integration_bridge']} as "
                     f"{config['compute']['name']})")
    driver = load_driver(config)
    try:
        lines.append(f"driver: ok ({driver.check()})")
    finally:
        driver.close()
    listen = checked_listen(config)
    lines.append(f"metrics: ok (http://{listen}/metrics)" if listen else "metrics: off")
    lines.append(console_relay(config))
    return lines


def console_relay(config: dict[str, Any]) -> str:
    """The console relay's line: off, or its address and a good certificate (ConfigError:
    a bad address, a missing file, a certificate not of the CA, expired, or another key)."""
    settings = config["console"]
    if settings["listen"] is None:
        return "console relay: off"
    from etcd_compute.compute.console_relay import listen_address, server_context

    listen_address(settings["listen"])
    server_context(settings, config["etcd"]["ca_cert"])  # the files, loadable together
    ca = settings["ca_cert"] or config["etcd"]["ca_cert"]
    problems = certificate_problems(Path(settings["cert"]), Path(settings["key"]), Path(ca))
    if problems:
        raise ConfigError(f"console: {problems[0]}")
    return f"console relay: ok ({settings['listen']}, {settings['cert']})"
