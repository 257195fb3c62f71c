"""A driver without VMs: each instance is a small JSON file.

It keeps a real driver's contract (idempotent, keyed by uuid, state on disk so it survives
restarts), so the daemon's exactly-once logic is tested for real. `builds.log` has a line per
build *attempt* ("start") and its outcome ("built", or "exists": there already, then started
if halted unless asked stopped), with the worker's parent (the daemon's forkserver) and the
time: how tests prove no instance was built twice. `guests.log` has a line whenever a guest
starts or stops running ("run", "halt"), with its host and the time: how tests prove no
instance runs on two hosts at once. One FakeDriver serves any number of simulated hosts
(`ecompute --fake-hosts N`). Stop, start, reboot, rebuild and resize change the file and log
the halts and runs; `driver.fake.action_seconds` makes them take time, `fail_actions` fail.
With `driver.fake.ovsdb`, a guest's Neutron ports are plugged on the host's Open vSwitch as
libvirt plugs taps (fake_vifs.py), so Neutron sets them ACTIVE.

A guest moves to another fake host's state directory on this machine (the "target" of
`prepare_incoming` names it): live, its file moves there and its halt here is logged before
its run there (no overlap, as libvirt's switch); cold, it is stopped here, copied there, and
defined there by `finish_incoming` while it stays here until destroyed. A live move takes
`action_seconds`, can be cancelled meanwhile (`abort_migration`), its job ends
`switch_seconds` after the switch (a cancel is too late then), and fails ("migrate" in
fail_actions) leaving the guest here; a destination with "incoming" in fail_actions cannot
make room (a host that said it had room and had none).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from etcd_compute.drivers import fake_vifs
from etcd_compute.drivers.base import Driver
from etcd_compute.drivers.fake_guest import boot_log, fake_diagnostics
from etcd_compute.errors import BuildError, RequestError


def fake_ip(uuid: str) -> str:
    """A stable address from TEST-NET-2 (198.51.100.0/24, never routed)."""
    return f"198.51.100.{int(hashlib.sha256(uuid.encode()).hexdigest(), 16) % 253 + 1}"


class FakeMoves:
    """A fake guest's moves between fake hosts (mixed into FakeDriver)."""

    root: Path
    action_seconds: float
    switch_seconds: float
    fail_actions: set[str]
    _path: Callable[[str], Path]
    _load: Callable[[str], dict[str, Any] | None]
    _set_running: Callable[[str, bool], bool]

    def _address(self, uuid: str) -> str | None:
        """The guest's address: none for a guest built without a network interface."""
        return None if (self._load(uuid) or {}).get("network") is False else fake_ip(uuid)

    def _marker(self, uuid: str, kind: str, root: Path | None = None) -> Path:
        return (root or self.root) / f".{uuid}.{kind}"

    def prepare_incoming(self, spec: dict[str, Any]) -> dict[str, Any]:
        uuid = spec["uuid"]
        if self._path(uuid).exists():
            raise BuildError(f"instance {uuid} already has a guest on this host")
        if "incoming" in self.fail_actions:
            # A host whose inventory said it had room, and had none.
            raise BuildError("fake hypervisor has no room for it after all "
                             "(driver.fake.fail_actions)")
        _check_image(spec.get("image", {}).get("url", ""))
        self._marker(uuid, "incoming").write_text(json.dumps({"host": spec["host"]}))
        return {"address": "127.0.0.1", "instance_dir": str(self.root), "base_sha256": None,
                "dhcp_server": None, "network": None}

    def discard_incoming(self, uuid: str) -> None:
        instance = self._load(uuid)
        if instance is not None and instance.get("running", True):
            raise BuildError(f"instance {uuid} runs on this host: not discarded")
        for kind in ("incoming", "sent"):
            self._marker(uuid, kind).unlink(missing_ok=True)
        if instance is not None:
            self._path(uuid).unlink(missing_ok=True)

    def live_migrate(self, uuid: str, target: dict[str, Any],
                     progress: Callable[[dict[str, Any]], None] | None = None,
                     cancelled: Callable[[], bool] | None = None) -> dict[str, Any]:
        instance = self._load(uuid)
        if instance is None or not instance.get("running", True):
            raise BuildError("live migration: the guest is not running (move it cold)")
        there = Path(target["instance_dir"])
        moving, abort = self._marker(uuid, "migrating"), self._marker(uuid, "abort")
        started = time.monotonic()
        moving.write_text(str(started))
        try:
            while time.monotonic() - started < self.action_seconds:
                if abort.exists() or (cancelled is not None and cancelled()):
                    raise BuildError(f"live migration to {target['address']}: cancelled; the "
                                     "guest runs on here")
                if progress is not None:
                    progress(self._progress(started))
                time.sleep(0.02)
            if "migrate" in self.fail_actions:
                raise BuildError("fake hypervisor cannot migrate (driver.fake.fail_actions)")
            incoming = self._marker(uuid, "incoming", there)
            if not incoming.exists():
                raise BuildError(f"live migration to {target['address']}: the destination "
                                 "made no room; the guest runs on here")
            host = json.loads(incoming.read_text())["host"]
            # The switch: halted here, then running there.
            _log_guest(self.root, uuid, instance["host"], "halt")
            _write_instance(there, uuid, {**instance, "host": host, "moved_at": time.time()})
            _log_guest(there, uuid, host, "run")
            incoming.unlink(missing_ok=True)
            self._path(uuid).unlink(missing_ok=True)
            # The job's end after the switch (libvirt's job completes after the guest runs
            # there): what a destroy arriving in between meets.
            time.sleep(self.switch_seconds)
        finally:
            moving.unlink(missing_ok=True)
            abort.unlink(missing_ok=True)
        return {"seconds": round(time.monotonic() - started, 3), "downtime_ms": 0}

    def _progress(self, started: float) -> dict[str, Any]:
        done = min(1.0, (time.monotonic() - started) / (self.action_seconds or 1))
        return {"elapsed_ms": int((time.monotonic() - started) * 1000), "data_total": 100,
                "data_processed": int(done * 100), "data_remaining": 100 - int(done * 100),
                "memory_iteration": 1, "disk_total": 0, "disk_processed": 0,
                "percent": round(done * 100, 1)}

    def abort_migration(self, uuid: str) -> bool:
        if not self._marker(uuid, "migrating").exists():
            return False
        self._marker(uuid, "abort").write_text("")
        return True

    def migration_progress(self, uuid: str) -> dict[str, Any] | None:
        try:
            started = float(self._marker(uuid, "migrating").read_text())
        except (OSError, ValueError):
            return None
        return self._progress(started)

    def send_stopped(self, uuid: str, target: dict[str, Any]) -> dict[str, Any]:
        instance = self._load(uuid)
        if instance is None:
            raise BuildError(f"instance {uuid} does not exist on this host")
        was_running = bool(instance.get("running", True))
        if "migrate" in self.fail_actions:
            raise BuildError("fake hypervisor cannot migrate (driver.fake.fail_actions)")
        self._set_running(uuid, False)
        sent = self._marker(uuid, "sent", Path(target["instance_dir"]))
        sent.write_text(json.dumps({**instance, "running": False}))
        return {"files": [], "macs": [], "base_sha256": None, "was_running": was_running,
                "address": None}

    def finish_incoming(self, spec: dict[str, Any], moved: dict[str, Any],
                        power_on: bool) -> dict[str, Any]:
        uuid = spec["uuid"]
        try:
            instance = json.loads(self._marker(uuid, "sent").read_text())
        except (OSError, ValueError):
            raise BuildError("cold migration: nothing arrived") from None
        _write_instance(self.root, uuid, {**instance, "host": spec["host"],
                                          "running": power_on, "moved_at": time.time()})
        if power_on:
            _log_guest(self.root, uuid, spec["host"], "run")
        for kind in ("sent", "incoming"):
            self._marker(uuid, kind).unlink(missing_ok=True)
        return {"ip": self._address(uuid)}


class FakeDriver(FakeMoves, Driver):
    name = "fake"

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.root = Path(config["compute"]["state_dir"]) / "fake-instances"
        self.root.mkdir(parents=True, exist_ok=True)
        self.build_seconds = config["driver"]["fake"]["build_seconds"]
        self.fail_builds = config["driver"]["fake"]["fail_builds"]
        self.action_seconds = config["driver"]["fake"]["action_seconds"]
        self.switch_seconds = config["driver"]["fake"]["switch_seconds"]
        self.fail_actions = set(config["driver"]["fake"]["fail_actions"])
        self.ovsdb = config["driver"]["fake"].get("ovsdb")  # null: plugs nothing

    def _path(self, uuid: str) -> Path:
        return self.root / f"{uuid}.json"

    def _log(self, uuid: str, event: str) -> None:
        with open(self.root / "builds.log", "a") as log:
            log.write(f"{uuid} {event} {os.getppid()} {time.time():.6f}\n")

    def _load(self, uuid: str) -> dict[str, Any] | None:
        try:
            return json.loads(self._path(uuid).read_text())
        except (OSError, ValueError):
            return None

    def _save(self, uuid: str, instance: dict[str, Any]) -> None:
        _write_instance(self.root, uuid, instance)

    def _set_running(self, uuid: str, running: bool) -> bool:
        """Flip the guest's running flag (atomically); False if it was so already. A guest
        powered off is paused no more (its memory is gone), as a libvirt domain."""
        instance = self._load(uuid)
        if instance is None or instance.get("running", True) == running:
            return False
        self._save(uuid, {**instance, "running": running,
                          **({} if running else {"paused": False})})
        _log_guest(self.root, uuid, instance.get("host", "-"), "run" if running else "halt")
        return True

    def build(self, spec: dict[str, Any]) -> dict[str, Any]:
        uuid = spec["uuid"]
        path = self._path(uuid)
        self._log(uuid, "start")
        if path.exists():
            return self._built_already(spec)
        if self.fail_builds:
            raise BuildError("fake hypervisor is broken (driver.fake.fail_builds)")
        image = spec.get("image", {}).get("url", "")
        _check_image(image)
        fake_vifs.plug(self.ovsdb, uuid, spec.get("vifs") or ())  # its Neutron ports
        if self.build_seconds:
            # Which worker is building what, for operators (and crash tests).
            marker = self.root / f".{uuid}.building"
            marker.write_text(str(os.getpid()))
            time.sleep(self.build_seconds)
            marker.unlink(missing_ok=True)
        networked = spec.get("network", True) and "vifs" not in spec  # ports: theirs
        result = {"ip": fake_ip(uuid) if networked else None}
        running = not spec.get("stopped")
        record = {"uuid": uuid, "host": spec["host"], "result": result, "built_at": time.time(),
                  "running": running, "resources": spec["resources"], "image": image,
                  "network": networked,
                  "security_groups": spec.get("security_groups"),  # its NIC's filter
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
            _log_guest(self.root, uuid, spec["host"], "run")
        try:
            os.link(staging, path)
        except FileExistsError:
            return self._built_already(spec)
        finally:
            staging.unlink()
        self._log(uuid, "built")
        return result

    def _built_already(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A build run again (a restart; a fence cut it once the guest was made): a halted
        guest is started unless asked stopped, as the libvirt driver starts its domain."""
        self._log(spec["uuid"], "exists")
        fake_vifs.plug(self.ovsdb, spec["uuid"], spec.get("vifs") or ())
        if not spec.get("stopped"):
            self._set_running(spec["uuid"], True)
        return json.loads(self._path(spec["uuid"]).read_text())["result"]

    def destroy(self, uuid: str) -> None:
        self._set_running(uuid, False)
        fake_vifs.unplug(self.ovsdb, uuid)
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
        return {"ip": self._address(uuid)}

    def suspend(self, uuid: str) -> None:
        instance = self._begin(uuid, "suspend")
        if instance.get("suspended"):
            return  # done already (a job run again after a restart)
        if not instance.get("running", True):
            raise BuildError("suspend: the guest is not running")
        self._set_running(uuid, False)
        self._save(uuid, {**self._load(uuid), "suspended": True})

    def resume(self, uuid: str) -> dict[str, Any]:
        instance = self._begin(uuid, "resume")
        # The flag says the memory was kept: resumed, not booted (tests read it).
        self._save(uuid, {**instance, "suspended": False,
                          "resumes": int(instance.get("resumes", 0)) + bool(
                              instance.get("suspended"))})
        self._set_running(uuid, True)
        return {"ip": self._address(uuid)}

    def pause(self, uuid: str) -> None:
        self._pause(uuid, "pause", True)

    def unpause(self, uuid: str) -> dict[str, Any]:
        self._pause(uuid, "unpause", False)
        return {"ip": self._address(uuid)}

    def _pause(self, uuid: str, action: str, paused: bool) -> None:
        """The running guest frozen or run on (done already: nothing); `unpauses` counts
        the times it ran on from a pause, not booted (tests read it)."""
        instance = self._begin(uuid, action)
        if not instance.get("running", True):
            raise BuildError(f"{action}: the guest is not running")
        ran_on = not paused and bool(instance.get("paused"))
        self._save(uuid, {**instance, "paused": paused,
                          "unpauses": int(instance.get("unpauses", 0)) + ran_on})

    def reboot(self, uuid: str, hard: bool) -> dict[str, Any]:
        self._begin(uuid, "reboot")
        self._set_running(uuid, False)
        self._set_running(uuid, True)
        return {"ip": self._address(uuid)}

    def rebuild(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid, image = spec["uuid"], spec.get("image", {}).get("url", "")
        self._begin(uuid, "rebuild")
        _check_image(image)  # before the guest is touched: a refused image changes nothing
        self._set_running(uuid, False)
        self._save(uuid, {**self._load(uuid), "image": image, "rebuilt_at": time.time(),
                          "user_data": spec.get("user_data"), "ssh_key": spec.get("ssh_key")})
        if power_on:
            self._set_running(uuid, True)
        return {"ip": self._address(uuid)}

    def resize(self, spec: dict[str, Any], power_on: bool) -> dict[str, Any]:
        uuid = spec["uuid"]
        self._begin(uuid, "resize")
        self._set_running(uuid, False)
        self._save(uuid, {**self._load(uuid), "resources": spec["resources"]})
        if power_on:
            self._set_running(uuid, True)
        return {"ip": self._address(uuid)}

    def set_security_groups(self, spec: dict[str, Any], groups: list[str]) -> None:
        """The flag only (no network here): tests read it from the instance's file."""
        instance = self._begin(spec["uuid"], "security-groups")
        self._save(spec["uuid"], {**instance, "security_groups": list(groups)})

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
        return boot_log(uuid)

    def diagnostics(self, uuid: str) -> dict[str, Any] | None:
        instance = self._load(uuid)
        return fake_diagnostics(instance) if instance is not None else None


def _write_instance(root: Path, uuid: str, instance: dict[str, Any]) -> None:
    """Write the instance file (atomically: a killed job leaves the old one whole)."""
    staging = root / f".{uuid}.{os.getpid()}.state"
    staging.write_text(json.dumps(instance))
    staging.replace(root / f"{uuid}.json")


def _log_guest(root: Path, uuid: str, host: str, event: str) -> None:
    with open(root / "guests.log", "a") as log:
        log.write(f"{uuid} {event} {host} {time.time():.6f}\n")


def _check_image(url: str) -> None:
    """A file:// image must exist (the request's fault otherwise), as with a real driver."""
    parsed = urlparse(url)
    if parsed.scheme == "file" and not Path(unquote(parsed.path)).exists():
        raise RequestError(f"image {url} not found")
