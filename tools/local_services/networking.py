"""The network service's stack: MariaDB and OVN's central services side by side, then
Neutron on them, behind a Keystone started elsewhere, in whose catalog it is the `network`
service (`neutron`) while it runs; stopped together by their pids.

What each start took is kept (`timings`, seconds), for the tests to report.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from etcd_compute.pki import Pki
from tools.local_services.keystone import KeystoneServer
from tools.local_services.mariadb import MariaDBServer
from tools.local_services.neutron import NeutronServer
from tools.local_services.ovn import OvnCentral
from tools.local_services.process import stop_pids


@dataclass
class NetworkStack:
    mariadb: MariaDBServer
    ovn: OvnCentral
    neutron: NeutronServer
    timings: dict[str, float] = field(default_factory=dict)

    @classmethod
    def create(cls, run_dir: Path, keystone: KeystoneServer, pki: Pki | None = None,
               neutron_workers: int = 1) -> NetworkStack:
        mariadb = MariaDBServer.create(run_dir / "mariadb")
        ovn = OvnCentral.create(run_dir / "ovn")
        neutron = NeutronServer.create(run_dir / "neutron", keystone, mariadb, ovn, pki=pki,
                                       workers=neutron_workers)
        return cls(mariadb, ovn, neutron)

    @property
    def pids(self) -> list[int]:
        """The processes we started (gunicorn's worker is its master's child)."""
        return [pid for pid in (self.mariadb.pid, *self.ovn.pids, self.neutron.pid) if pid]

    def _timed(self, name: str, start: Callable[[], object]) -> None:
        began = time.monotonic()
        start()
        self.timings[name] = time.monotonic() - began

    def start(self) -> NetworkStack:
        """MariaDB and OVN side by side, then Neutron; everything stopped if one fails."""
        began = time.monotonic()
        try:
            with ThreadPoolExecutor(2) as pool:
                started = [pool.submit(self._timed, "mariadb", self.mariadb.start),
                           pool.submit(self._timed, "ovn", self.ovn.start)]
            for future in started:
                future.result()
            self._timed("neutron", self.neutron.start)
            self.neutron.keystone.add_service("network", "neutron", self.neutron.endpoint)
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - began
        return self

    def stop(self) -> None:
        """Out of the catalog (if its Keystone still runs), Neutron stopped first (it holds
        connections to the others), then the rest side by side; MariaDB's data directory is
        removed."""
        try:
            if self.neutron.running() and self.neutron.keystone.running():
                self.neutron.keystone.remove_service("neutron")
        finally:
            self.neutron.stop()
            stop_pids([self.mariadb.pid, *self.ovn.pids])
            self.ovn.stop()
            self.mariadb.stop()
