"""Our metadata server as a host of Neutron's runs it: `python -m etcd_compute.mdserver` in
signed mode (etcd_compute/mdserver/signed.py), for the host's Neutron OVN metadata agent
(ovn_metadata.py) to ask, in the root namespace (where a compute host's own services run,
and Keystone and Neutron answer it for public-ipv4) on the address the agent asks, the
hosts' bridge's own (`agent.api_host`, one port each).

    api = HostMdserver.create(run_dir, host, agent.api_host, agent.api_port, instances_dir,
                              libvirt_uri, agent.secret_file, compute_config).start()
    api.get("/openstack/latest/meta_data.json", {"X-Instance-ID": ...})  # from the host
    api.stop()

It is started and stopped by its pid; its configuration (with `compute_config`: the host's
compute.yaml, whose Neutron credential it asks with), pid file and log are in the run
directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from etcd_compute.errors import ServiceUnavailable
from etcd_compute.virt.instance_files import write_private
from tools.local_services.netns import Host
from tools.local_services.process import REPO, Service, wait_until

# One request from inside the host's namespace: prints the status, then the body.
CLIENT = """
import json, sys, urllib.error, urllib.request
data = sys.argv[3].encode("latin-1") if len(sys.argv) > 3 else None
request = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]), data=data)
try:
    with urllib.request.urlopen(request, timeout=10) as answer:
        status, body = answer.status, answer.read()
except urllib.error.HTTPError as error:
    status, body = error.code, error.read()
sys.stdout.write(f"{status}\\n")
sys.stdout.flush()
sys.stdout.buffer.write(body)
"""


def in_host(host: Host, argv: list[str]) -> list[str]:
    """`argv` in `host`'s network namespace only (nsenter, not `ip netns exec`: no mount
    namespace of its own)."""
    return ["nsenter", f"--net=/run/netns/{host.netns}", "--", *argv]


def http_get(host: Host, url: str, headers: dict[str, str] | None = None,
             timeout: float = 30, data: bytes | None = None) -> tuple[int, bytes]:
    """GET `url` from inside `host`'s namespace (POST `data`, latin-1 bytes, when given):
    (status, body); status 0 when nothing answered."""
    body = [] if data is None else [data.decode("latin-1")]
    done = subprocess.run(in_host(host, [sys.executable, "-c", CLIENT, url,
                                         json.dumps(headers or {}), *body]),
                          capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        return 0, done.stderr[-500:]
    status, _, body = done.stdout.partition(b"\n")
    return int(status), body


class HostMdserver(Service):
    """The metadata API of a host, in signed mode on 127.0.0.1:`port` of its namespace."""

    host: Host
    address: str
    compute_config: dict[str, Any] | None
    instances_dir: Path
    libvirt_uri: str
    secret_file: Path

    @classmethod
    def create(cls, run_dir: Path, host: Host, address: str, port: int, instances_dir: Path,
               libvirt_uri: str, secret_file: Path,
               compute_config: dict[str, Any] | None = None) -> HostMdserver:
        """`host`: where `get` asks from; `compute_config`: the host's compute's (none: no
        public-ipv4)."""
        server = cls("mdserver", run_dir, port)
        server.host, server.address, server.instances_dir = host, address, instances_dir
        server.compute_config = compute_config
        server.libvirt_uri, server.secret_file = libvirt_uri, secret_file
        return server

    @property
    def config_file(self) -> Path:
        return self.run_dir / "mdserver.conf"

    @property
    def pid_file(self) -> Path:
        return self.run_dir / "mdserver.pid"

    @property
    def url(self) -> str:
        return f"http://{self.address}:{self.port}"

    def start(self, timeout: float = 30) -> HostMdserver:
        """Started and listening (its pid file is written once it listens)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        compute_yaml = ""
        if self.compute_config is not None:
            compute_yaml = str(self.run_dir / "compute.yaml")
            write_private(Path(compute_yaml), yaml.safe_dump(self.compute_config).encode())
        self.config_file.write_text(
            "[mdserver]\n"
            "mode = signed\n"
            f"shared_secret_file = {self.secret_file}\n"
            f"compute_config = {compute_yaml}\n"
            f"bind_address = {self.address}\n"
            f"port = {self.port}\n"
            f"instances_dir = {self.instances_dir}\n"
            f"libvirt_uri = {self.libvirt_uri}\n"
            f"log_file = {self.log_path}\n")
        self.pid_file.unlink(missing_ok=True)
        self._spawn([sys.executable, "-m", "etcd_compute.mdserver",
                     "--config", str(self.config_file), "--pid-file", str(self.pid_file)],
                    env={"PYTHONPATH": str(REPO)}, cwd=REPO)

        def listening() -> bool:
            if not self.running():
                raise self._fail(f"the metadata API of {self.host.name} exited at start")
            return self.pid_file.exists()

        try:
            wait_until(listening, timeout, f"the metadata API of {self.host.name}")
        except ServiceUnavailable as exc:
            raise self._fail(str(exc)) from None
        return self

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        """GET `path` of the server from inside its host (straight, not through the agent)."""
        return http_get(self.host, self.url + path, headers)
