"""A driver without VMs: each instance is a small JSON file.

It keeps the contract of a real driver (idempotent, keyed by uuid, survives
daemon restarts because its state is on disk) so the daemon's exactly-once
logic is tested for real. `builds.log` gets a line for every build *attempt*
("start") and its outcome ("built", or "exists" when the instance was there
already), with the worker's parent (the daemon's forkserver: one per daemon
run) and the time: how tests prove that no instance was built twice, nor
asked for again once done. `guests.log` gets a line whenever a guest starts
or stops running ("run", "halt"), with its host and the time: how tests prove
that no instance ever runs on two hosts at once. One FakeDriver serves any
number of simulated hosts (`ecompute --fake-hosts N`). Stop, start, reboot,
rebuild and resize change the file (running, resources, image) and log the
guest's halts and runs; `driver.fake.action_seconds` makes them take time and
`driver.fake.fail_actions` makes them fail, leaving the instance as it was.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from etcd_compute.drivers.base import Driver
from etcd_compute.errors import BuildError, RequestError


def fake_ip(uuid: str) -> str:
    """A stable address from TEST-NET-2 (198.51.100.0/24, never routed)."""
    return f"198.51.100.{int(hashlib.sha256(uuid.encode()).hexdigest(), 16) % 253 + 1}"


class FakeDriver(Driver):
    name = "fake"

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.root = Path(config["compute"]["state_dir"]) / "fake-instances"
        self.root.mkdir(parents=True, exist_ok=True)
        self.build_seconds = config["driver"]["fake"]["build_seconds"]
        self.fail_builds = config["driver"]["fake"]["fail_builds"]
        self.action_seconds = config["driver"]["fake"]["action_seconds"]
        self.fail_actions = set(config["driver"]["fake"]["fail_actions"])

    def _path(self, uuid: str) -> Path:
        return self.root / f"{uuid}.json"

    def _log(self, uuid: str, event: str) -> None:
        with open(self.root / "builds.log", "a") as log:
            log.write(f"{uuid} {event} {os.getppid()} {time.time():.6f}\n")

    def _guest_event(self, uuid: str, host: str, event: str) -> None:
        with open(self.root / "guests.log", "a") as log:
            log.write(f"{uuid} {event} {host} {time.time():.6f}\n")

    def _load(self, uuid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(uuid).read_text())
        except (OSError, ValueError):
            return None

    def _save(self, uuid: str, instance: dict[str, Any]) -> None:
        """Write the instance file (atomically: a killed job leaves the old one whole)."""
        staging = self.root / f".{uuid}.{os.getpid()}.state"
        staging.write_text(json.dumps(instance))
        staging.replace(self._path(uuid))

    def _set_running(self, uuid: str, running: bool) -> bool:
        """Flip the guest's running flag (atomically); False if it was so already."""
        instance = self._load(uuid)
        if instance is None or instance.get("running", True) == running:
            return False
        self._save(uuid, {**instance, "running": running})
        self._guest_event(uuid, instance.get("host", "-"), "run" if running else "halt")
        return True

    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        uuid = spec["uuid"]
        path = self._path(uuid)
        self._log(uuid, "start")
        if path.exists():
            self._log(uuid, "exists")
            return json.loads(path.read_text())["result"]
        if self.fail_builds:
            raise BuildError("fake hypervisor is broken (driver.fake.fail_builds)")
        image = spec.get("image", {}).get("url", "")
        _check_image(image)
        if self.build_seconds:
            # Which worker is building what, for operators (and crash tests).
            marker = self.root / f".{uuid}.building"
            marker.write_text(str(os.getpid()))
            time.sleep(self.build_seconds)
            marker.unlink(missing_ok=True)
        result = {"ip": fake_ip(uuid)}
        running = not spec.get("stopped")
        record = {"uuid": uuid, "host": spec["host"], "result": result, "built_at": time.time(),
                  "running": running, "resources": spec["resources"], "image": image,
                  # What its config drive would carry.
                  "user_data": spec.get("user_data"), "ssh_key": spec.get("ssh_key")}
        # Write aside, then link into place: the instance appears whole or not at all
        # (a kill -9 mid-write must not leave a half instance), and of two racing
        # builds of one uuid only the first link succeeds.
        staging = self.root / f".{uuid}.{os.getpid()}.tmp"
        staging.write_text(json.dumps(record))
        # Logged before the guest exists: a kill in between leaves a "run" too many (a
        # test may see a guest run longer than it did), never one too few.
        if running:
            self._guest_event(uuid, spec["host"], "run")
        try:
            os.link(staging, path)
        except FileExistsError:
            self._log(uuid, "exists")
            return json.loads(path.read_text())["result"]
        finally:
            staging.unlink()
        self._log(uuid, "built")
        return result

    def destroy(self, uuid: str) -> None:
        self._set_running(uuid, False)
        with contextlib.suppress(FileNotFoundError):
            self._path(uuid).unlink()

    def fence(self) -> list[str]:
        # Builds in flight die with the pool's workers here, and are started again after:
        # the log says where one daemon run's builds were cut (tests tell a resumed build
        # from a duplicate by it).
        with open(self.root / "builds.log", "a") as log:
            log.write(f"- fence {os.getpid()} {time.time():.6f}\n")
        return super().fence()

    # -- an operator's actions

    def _begin(self, uuid: str, action: str) -> dict[str, Any]:
        """The instance, after the action's time; BuildError if it fails or is not here."""
        if self.action_seconds:
            time.sleep(self.action_seconds)
        if action in self.fail_actions:
            raise BuildError(f"fake hypervisor cannot {action} (driver.fake.fail_actions)")
        instance = self._load(uuid)
        if instance is None:
            raise BuildError(f"instance {uuid} does not exist on this host")
        return instance

    def stop(self, uuid: str) -> None:
        self._begin(uuid, "stop")
        self._set_running(uuid, False)

    def start(self, uuid: str) -> dict[str, Any]:
        self._begin(uuid, "start")
        self._set_running(uuid, True)
        return {"ip": fake_ip(uuid)}

    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        self._begin(uuid, "reboot")
        self._set_running(uuid, False)
        self._set_running(uuid, True)
        return {"ip": fake_ip(uuid)}

    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid, image = spec["uuid"], spec.get("image", {}).get("url", "")
        self._begin(uuid, "rebuild")
        _check_image(image)  # before the guest is touched: a refused image changes nothing
        self._set_running(uuid, False)
        self._save(uuid, {**self._load(uuid), "image": image, "rebuilt_at": time.time(),
                          "user_data": spec.get("user_data"), "ssh_key": spec.get("ssh_key")})
        if power_on:
            self._set_running(uuid, True)
        return {"ip": fake_ip(uuid)}

    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid = spec["uuid"]
        self._begin(uuid, "resize")
        self._set_running(uuid, False)
        self._save(uuid, {**self._load(uuid), "resources": spec["resources"]})
        if power_on:
            self._set_running(uuid, True)
        return {"ip": fake_ip(uuid)}

    def snapshot(self, spec: dict[str, Any], image_id: str, running: bool) -> dict[str, Any]:
        """No disk here: an empty 1 GiB qcow2 (qemu-img) is what is uploaded, through the
        same upload as the libvirt driver's, so Glance, its credential and a failed upload
        are real."""
        import subprocess
        import tempfile

        from etcd_compute.errors import ConfigError
        from etcd_compute.glance import GlanceClient
        from etcd_compute.virt import snapshot

        uuid = spec["uuid"]
        self._begin(uuid, "snapshot")
        try:
            glance = GlanceClient(self.config["glance"])
        except ConfigError as exc:
            raise BuildError(f"snapshot: this host cannot reach Glance: {exc}") from None
        with tempfile.TemporaryDirectory(prefix="fake-snapshot-") as work:
            target = Path(work) / "snapshot.qcow2"
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(target), "1G"],
                           check=True)
            snapshot.upload(glance, image_id, target)
        return {"detail": f"image {image_id}: fake disk"}

    def running(self) -> set[str]:
        return {uuid for uuid in self.list_instances()
                if (self._load(uuid) or {}).get("running", True)}

    def power_off(self, uuid: str) -> bool:
        return self._set_running(uuid, False)

    def power_on(self, uuid: str) -> bool:
        return self._set_running(uuid, True)

    def list_instances(self) -> set[str]:
        return {path.stem for path in self.root.glob("*.json")}

    def console(self, uuid: str, max_bytes: int = 65536) -> str:
        if not self._path(uuid).exists():
            return ""
        return f"fake console of {uuid}: booted\n"


def _check_image(url: str) -> None:
    """A file:// image must exist (the request's fault otherwise), as with a real driver."""
    parsed = urlparse(url)
    if parsed.scheme == "file" and not Path(unquote(parsed.path)).exists():
        raise RequestError(f"image {url} not found")
