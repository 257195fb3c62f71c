"""etcd 3.4 from Debian as plain processes: one member, or a cluster (in network namespaces).

With a `Pki`, a member serves clients and peers over TLS, requires client
certificates (`--client-cert-auth`: the certificate's CN is the etcd user),
and `enable_auth` turns RBAC on with root, the operator role and operator
users (see etcd_compute/etcd_auth.py). Without one it is plain TCP, for
quick experiments.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.etcd_auth import ROOT, EtcdAuth
from etcd_compute.pki import ETCD_MEMBER, OPERATOR, Pki
from etcd_compute.pki import ROOT as ROOT_KIND
from tools.local_services.process import Service, free_port

# One scheduler request is one transaction (3 writes per instance, 4 in a group); etcd's
# default of 128 caps --count at 42. Match scheduler.etcd_max_txn_ops.
MAX_TXN_OPS = 4096


class EtcdServer(Service):
    """One etcd member. `extra`: ip, peer_port, netns (optional), cluster (initial cluster)."""

    pki: Pki | None = None

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None, pki: Pki | None = None,
               name: str = "etcd", ip: str = "127.0.0.1", peer_port: int | None = None,
               netns: str | None = None) -> EtcdServer:
        server = cls(name, run_dir, port or free_port(),
                     extra={"ip": ip, "peer_port": str(peer_port or free_port()),
                            "netns": netns or ""})
        server.pki = pki
        return server

    @property
    def scheme(self) -> str:
        return "https" if self.pki else "http"

    @property
    def endpoint(self) -> str:
        return f"{self.extra['ip']}:{self.port}"

    @property
    def peer_url(self) -> str:
        return f"{self.scheme}://{self.extra['ip']}:{self.extra['peer_port']}"

    def argv(self, initial_cluster: str | None = None, state: str = "new") -> list[str]:
        if shutil.which("etcd") is None:
            raise ServiceUnavailable("etcd is not installed; run: make install")
        client_url = f"{self.scheme}://{self.endpoint}"
        argv = [
            "etcd",
            "--name", self.name,
            "--data-dir", str(self.run_dir / f"{self.name}-data"),
            "--listen-client-urls", client_url,
            "--advertise-client-urls", client_url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster or f"{self.name}={self.peer_url}",
            "--initial-cluster-state", state,
            # Keep history bounded the way an operator would.
            "--auto-compaction-retention", "1",
            "--max-txn-ops", str(MAX_TXN_OPS),
            "--log-level", "warn",
        ]
        if self.pki:
            issued = self.pki.issue(self.name, ETCD_MEMBER, ips=sorted({self.extra["ip"],
                                                                       "127.0.0.1"}))
            argv += [
                "--cert-file", str(issued.cert), "--key-file", str(issued.key),
                "--trusted-ca-file", str(self.pki.ca_cert), "--client-cert-auth",
                "--peer-cert-file", str(issued.cert), "--peer-key-file", str(issued.key),
                "--peer-trusted-ca-file", str(self.pki.ca_cert), "--peer-client-cert-auth",
            ]
        if self.extra.get("netns"):
            argv = ["ip", "netns", "exec", self.extra["netns"], *argv]
        return argv

    def spawn(self, initial_cluster: str | None = None, state: str = "new") -> None:
        self._spawn(self.argv(initial_cluster, state))

    def wait_healthy(self, timeout: float = 20) -> None:
        verify: str | bool = True
        cert = None
        if self.pki:
            issued = self.pki.issue(ROOT, ROOT_KIND)
            verify, cert = str(self.pki.ca_cert), (str(issued.cert), str(issued.key))
        self._wait_healthy(f"{self.scheme}://{self.endpoint}/health", timeout, verify, cert)

    def start(self, attempts: int = 3) -> EtcdServer:
        def moved() -> None:
            shutil.rmtree(self.run_dir / f"{self.name}-data", ignore_errors=True)
            self.extra["peer_port"] = str(free_port())

        def start_once() -> None:
            self.spawn()
            self.wait_healthy()

        self.start_on_a_free_port(start_once, attempts, moved)
        return self

    def client_config(self, prefix: str = "", user: str | None = None,
                      endpoints: list[str] | None = None) -> dict[str, Any]:
        """An `etcd:` config section for a client; with TLS, as the certificate `user`."""
        config: dict[str, Any] = {"endpoints": endpoints or [self.endpoint], "prefix": prefix,
                                  "timeout": 5.0}
        if endpoints is None:
            config["election_seconds"] = 0  # one member: no leader elections to outlast
        if self.pki:
            name = user or ROOT
            issued = self.pki.issue(name, ROOT_KIND if name == ROOT else OPERATOR)
            config.update(ca_cert=str(self.pki.ca_cert), cert=str(issued.cert),
                          key=str(issued.key))
        return config

    def enable_auth(self, operators: list[str], prefix: str = "") -> None:
        """RBAC on: root, the operator role and these operators (TLS members only)."""
        assert self.pki is not None, "auth needs TLS (the certificate's CN is the user)"
        for name in operators:
            self.pki.issue(name, OPERATOR)
        with Store(self.client_config(prefix, ROOT)) as store:
            EtcdAuth(store).setup(operators)
