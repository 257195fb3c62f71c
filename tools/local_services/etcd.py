"""etcd 3.4 from Debian as a plain process, data dir under its run dir."""

from __future__ import annotations

import shutil
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import Service, free_port


class EtcdServer(Service):
    """etcd 3.4 from Debian as a plain process, data dir under run_dir."""

    @classmethod
    def create(cls, run_dir: Path, port: int | None = None) -> EtcdServer:
        return cls("etcd", run_dir, port or free_port(), extra={"peer_port": str(free_port())})

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> EtcdServer:
        if shutil.which("etcd") is None:
            raise ServiceUnavailable("etcd is not installed; run: make install")
        client_url = f"http://127.0.0.1:{self.port}"
        peer_url = f"http://127.0.0.1:{self.extra['peer_port']}"
        self._spawn(
            [
                "etcd",
                "--name", "local",
                "--data-dir", str(self.run_dir / "etcd-data"),
                "--listen-client-urls", client_url,
                "--advertise-client-urls", client_url,
                "--listen-peer-urls", peer_url,
                "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"local={peer_url}",
                # Keep history bounded the way an operator would.
                "--auto-compaction-retention", "1",
                # One scheduler request is one transaction (2 ops per instance);
                # the default of 128 caps --count at 42. Match scheduler.etcd_max_txn_ops.
                "--max-txn-ops", "4096",
                "--log-level", "warn",
            ]
        )
        self._wait_healthy(f"http://{self.endpoint}/health", 20)
        return self
