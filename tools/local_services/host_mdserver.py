"""Our metadata server as a host of Neutron's runs it: `python -m etcd_compute.mdserver` in
signed mode (etcd_compute/mdserver/signed.py), in the host's network namespace on its
loopback, for the host's Neutron OVN metadata agent (ovn_metadata.py) to ask.

    api = HostMdserver.create(run_dir, host, port, instances_dir, libvirt_uri,
                              agent.secret_file).start()
    api.get("/openstack/latest/meta_data.json", {"X-Instance-ID": ...})  # from the host
    api.stop()

It is started and stopped by its pid (nsenter execs in place: the pid is the server's);
its configuration, pid file and log are in the run directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.netns import Host
from tools.local_services.process import REPO, Service, wait_until

# One request from inside the host's namespace: prints the status, then the body.
CLIENT = """
import json, sys, urllib.error, urllib.request
request = urllib.request.Request(sys.argv[1], headers=json.loads(sys.argv[2]))
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
             timeout: float = 30) -> tuple[int, bytes]:
    """GET `url` from inside `host`'s namespace: (status, body); status 0 when nothing
    answered."""
    done = subprocess.run(in_host(host, [sys.executable, "-c", CLIENT, url,
                                         json.dumps(headers or {})]),
                          capture_output=True, timeout=timeout, check=False)
    if done.returncode != 0:
        return 0, done.stderr[-500:]
    status, _, body = done.stdout.partition(b"\n")
    return int(status), body


class HostMdserver(Service):
    """The metadata API of a host, in signed mode on 127.0.0.1:`port` of its namespace."""

    host: Host
    instances_dir: Path
    libvirt_uri: str
    secret_file: Path

    @classmethod
    def create(cls, run_dir: Path, host: Host, port: int, instances_dir: Path,
               libvirt_uri: str, secret_file: Path) -> HostMdserver:
        server = cls("mdserver", run_dir, port)
        server.host, server.instances_dir = host, instances_dir
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
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30) -> HostMdserver:
        """Started and listening (its pid file is written once it listens)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(
            "[mdserver]\n"
            "mode = signed\n"
            f"shared_secret_file = {self.secret_file}\n"
            "bind_address = 127.0.0.1\n"
            f"port = {self.port}\n"
            f"instances_dir = {self.instances_dir}\n"
            f"libvirt_uri = {self.libvirt_uri}\n"
            f"log_file = {self.log_path}\n")
        self.pid_file.unlink(missing_ok=True)
        self._spawn(in_host(self.host, [sys.executable, "-m", "etcd_compute.mdserver",
                                        "--config", str(self.config_file),
                                        "--pid-file", str(self.pid_file)]),
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
