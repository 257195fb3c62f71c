"""The console proxy (`schedule.py console-proxy`: noVNC and websockify) as a local
service beside the compute API, and the `console` sections that point the API, the
operator and a hand-run host at it: the proxy's client certificate (`console-proxy`), a
host's relay certificate (`console-relay`, its address), all from the cluster CA."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from etcd_compute.pki import CONSOLE_PROXY, CONSOLE_RELAY, Pki
from tools.local_services.process import REPO, Service, free_port

PROXY_CERT = "console-proxy"


def operator_section(pki: Pki, port: int) -> dict[str, Any]:
    """schedule.yaml's `console`: URLs on the proxy at 127.0.0.1:`port`, and the proxy's
    certificate toward the hosts' relays."""
    issued = pki.issue(PROXY_CERT, CONSOLE_PROXY)
    return {"proxy_listen": f"127.0.0.1:{port}",
            "base_url": f"http://127.0.0.1:{port}/vnc_lite.html",
            "cert": str(issued.cert), "key": str(issued.key), "ca_cert": str(pki.ca_cert)}


def host_section(pki: Pki, name: str, address: str, port: int | None = None
                 ) -> dict[str, Any]:
    """compute.yaml's `console`: the relay on `address`:`port` (a free one if not given),
    with a server certificate naming that address."""
    issued = pki.issue(f"console-relay-{name}", CONSOLE_RELAY, ips=[address])
    return {"listen": f"{address}:{port or free_port()}", "cert": str(issued.cert),
            "key": str(issued.key), "ca_cert": str(pki.ca_cert)}


class ConsoleProxyServer(Service):
    """`schedule.py --config <run>/console-proxy.yaml console-proxy` on 127.0.0.1:<port>."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None,
               name: str = "console-proxy") -> ConsoleProxyServer:
        return cls(name, run_dir, port or free_port())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/vnc_lite.html"

    @property
    def config_path(self) -> Path:
        return self.run_dir / f"{self.name}.yaml"

    def start(self, config: dict[str, Any], timeout: float = 30) -> ConsoleProxyServer:
        """`config`: the operator's sections with `console` (operator_section's)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        console = {**config["console"], "proxy_listen": f"127.0.0.1:{self.port}"}
        self.config_path.write_text(yaml.safe_dump({**config, "console": console}))
        self.config_path.chmod(0o600)  # the operator's etcd credentials
        self._spawn([sys.executable, str(REPO / "schedule.py"), "--config",
                     str(self.config_path), "console-proxy"])
        self._wait_healthy(self.url, timeout)
        return self
