"""Debian's Prometheus as a plain child process, scraping given targets (the tests').

A temporary config and storage directory under the run directory, loopback
only, a free port, the scrape interval the caller asks for (1 s in tests),
stopped by pid. Never the packaged system service.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import requests
import yaml

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import Service, free_port


class PrometheusServer(Service):
    """One Prometheus. `targets`: job name -> ["host:port", ...]."""

    targets: dict[str, list[str]]
    interval: float = 1.0

    @classmethod
    def create(cls, run_dir: Path, targets: dict[str, list[str]], interval: float = 1.0,
               port: int | None = None) -> PrometheusServer:
        server = cls("prometheus", run_dir, port or free_port())
        server.targets, server.interval = targets, interval
        return server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        every = f"{int(self.interval * 1000)}ms"
        return {
            "global": {"scrape_interval": every, "scrape_timeout": every,
                       "evaluation_interval": every},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": targets}]}
                               for job, targets in sorted(self.targets.items())],
        }

    def start(self, timeout: float = 30) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise ServiceUnavailable("prometheus is not installed; run: make install")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config = self.run_dir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config()))
        self._spawn([binary, f"--config.file={config}",
                     f"--storage.tsdb.path={self.run_dir / 'data'}",
                     f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"])
        self._wait_healthy(f"{self.url}/-/ready", timeout)
        return self

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query (GET /api/v1/query): the result vector."""
        answer = requests.get(f"{self.url}/api/v1/query", params={"query": expression},
                              timeout=5)
        answer.raise_for_status()
        body = answer.json()
        if body.get("status") != "success":
            raise AssertionError(f"query {expression!r} failed: {body}")
        return body["data"]["result"]

    def value(self, expression: str) -> float | None:
        """The single value `expression` evaluates to now, or None when it is empty."""
        result = self.query(expression)
        if not result:
            return None
        if len(result) != 1:
            raise AssertionError(f"{expression!r} gave {len(result)} series: {result}")
        return float(result[0]["value"][1])
