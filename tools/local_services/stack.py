"""`make up` / `make down` / `make status`: a state file remembers what we started."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.etcd import EtcdServer
from tools.local_services.libvirt import ensure_libvirtd
from tools.local_services.placement import PlacementServer
from tools.local_services.process import Service, pid_alive, port_open, stop_pid


@dataclass
class LocalStack:
    run_dir: Path
    etcd: dict | None = None
    placement: dict | None = None
    # virtlogd and libvirtd, when we started them.
    libvirt_pids: list[int] = field(default_factory=list)

    @property
    def state_file(self) -> Path:
        return self.run_dir / "services.json"

    @classmethod
    def load(cls, run_dir: Path) -> LocalStack:
        stack = cls(run_dir)
        if stack.state_file.exists():
            saved = json.loads(stack.state_file.read_text())
            stack.etcd, stack.placement = saved.get("etcd"), saved.get("placement")
            stack.libvirt_pids = saved.get("libvirt_pids", [])
        return stack

    def save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        state = {"etcd": self.etcd, "placement": self.placement,
                 "libvirt_pids": self.libvirt_pids}
        self.state_file.write_text(json.dumps(state, indent=2))

    def up(self, etcd_port: int, placement_port: int, say: Callable[[str], None]) -> None:
        if self.etcd and pid_alive(self.etcd["pid"]):
            say(f"etcd already running (pid {self.etcd['pid']}, port {self.etcd['port']})")
        else:
            if port_open(etcd_port):
                raise ServiceUnavailable(
                    f"port {etcd_port} is taken by another process; stop it or pass --etcd-port")
            etcd = EtcdServer.create(self.run_dir, etcd_port)
            etcd.start()
            self.etcd = _service_state(etcd)
            self.save()
            say(f"etcd started (pid {etcd.pid}, 127.0.0.1:{etcd.port})")
        if self.placement and pid_alive(self.placement["pid"]):
            say(f"Placement already running (pid {self.placement['pid']}, "
                f"port {self.placement['port']})")
        else:
            if port_open(placement_port):
                raise ServiceUnavailable(f"port {placement_port} is taken by another process; "
                                         "stop it or pass --placement-port")
            placement = PlacementServer.create(self.run_dir, placement_port)
            placement.start()
            self.placement = _service_state(placement)
            self.save()
            say(f"Placement started (pid {placement.pid}, {placement.endpoint}, SQLite)")
        if any(pid_alive(pid) for pid in self.libvirt_pids):
            say(f"libvirtd already running (pids {self.libvirt_pids})")
        else:
            try:
                self.libvirt_pids = ensure_libvirtd(self.run_dir)
            except ServiceUnavailable as exc:
                say(f"libvirtd not available ({exc}); the fake driver still works")
            else:
                say("libvirtd started" if self.libvirt_pids else "libvirtd already running")
            self.save()

    def down(self, say: Callable[[str], None]) -> None:
        for name in ("placement", "etcd"):
            state = getattr(self, name)
            if state and pid_alive(state["pid"]):
                stop_pid(state["pid"])
                say(f"{name} stopped (pid {state['pid']})")
            setattr(self, name, None)
        for pid in reversed(self.libvirt_pids):  # libvirtd before virtlogd
            if pid_alive(pid):
                stop_pid(pid)
                say(f"stopped libvirt daemon (pid {pid})")
        self.libvirt_pids = []
        self.save()


def _service_state(service: Service) -> dict:
    state = asdict(service)
    state["run_dir"] = str(service.run_dir)
    return state
