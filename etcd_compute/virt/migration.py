"""Live migration's libvirt pieces: where the guest goes, how, and watching it go.

    target = Target.from_dict(prepared)                 # what the destination made ready
    xml = destination_xml(domain.XMLDesc(MIGRATABLE), source_dir, target)
    domain.migrateSetMaxDowntime(limits.max_downtime_ms, 0)   # before the job
    with Supervisor(watched, limits, data_total=...):    # a thread: progress, bound, cancel
        domain.migrateToURI3(target.uri, migration_params(target, xml, local_disks(xml)),
                             LIVE_FLAGS)

Peer to peer (the source's libvirtd drives the destination's over `qemu+tls://`),
the memory stream and the disk copy (NBD) over TLS too (`VIR_MIGRATE_TLS`, with
qemu's `migrate_tls_x509_cert_dir`), never plain TCP or SSH. The local disks go
along incrementally (`VIR_MIGRATE_NON_SHARED_INC`, as Nova's block migration):
the destination has made an empty overlay on the same base image (same sha256),
and only the overlay's data crosses. The read-only config drive is not copied by
libvirt: the driver sends it first, byte for byte (`remote_files`).

The bound (docs/explanation/moves.md): auto-converge throttles a guest that dirties
memory faster than it crosses; the downtime allowed at the switch is
`max_downtime_ms`; if the job has not completed after `completion_timeout` (a
floor plus seconds per GiB of memory and disk to copy), the guest is paused so
the rest crosses without new writes (`pause`, the default) or the job is
cancelled (`abort`); at twice that time it is cancelled whatever the action. A
cancelled or failed job leaves the guest running on the source. The supervisor's
libvirt calls never hold the bound (`Supervisor`, `LibvirtCall`).
"""

from __future__ import annotations

import ipaddress
import logging
import re
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import libvirt

log = logging.getLogger(__name__)

GIB = 1024**3
LIVE_FLAGS = (libvirt.VIR_MIGRATE_LIVE | libvirt.VIR_MIGRATE_PEER2PEER
              | libvirt.VIR_MIGRATE_PERSIST_DEST | libvirt.VIR_MIGRATE_UNDEFINE_SOURCE
              | libvirt.VIR_MIGRATE_NON_SHARED_INC | libvirt.VIR_MIGRATE_TLS
              | libvirt.VIR_MIGRATE_AUTO_CONVERGE)
# A host name or address as libvirt puts it in a URI (and checks against the certificate).
_HOST_NAME = re.compile(r"\A[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?\Z")
_SHA256 = re.compile(r"\A[0-9a-f]{64}\Z")
_NETWORK_NAME = re.compile(r"\A[A-Za-z0-9_.-]{1,64}\Z")  # as compute_config.json has it
_TARGET_KEYS = ("address", "instance_dir", "base_sha256", "dhcp_server", "network")
TIMEOUT_ACTIONS = ("pause", "abort")


def check_address(address: str) -> str:
    """An IP address or DNS name a peer's libvirtd listens on; ValueError otherwise."""
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        if not _HOST_NAME.match(address or "") or ".." in address:
            raise ValueError(f"not an address or host name: {address!r}") from None
        return address


def peer_uri(address: str, pki_dir: str | Path) -> str:
    """How this host reaches a peer's libvirtd: TLS, with its own libvirt certificates."""
    host = check_address(address)
    if ":" in host:
        host = f"[{host}]"
    query = urllib.parse.urlencode({"pkipath": str(pki_dir)}, safe="/")
    return f"qemu+tls://{host}/system?{query}"


# Where a libvirtd serves TLS (libvirtd-tls.socket).
LIBVIRT_TLS_PORT = 16514


def certificate_host_names(der: bytes) -> list[str]:
    """The host names a libvirtd's server certificate is for (its DNS names: `cluster.py
    pki issue-libvirt HOST` puts HOST there)."""
    from cryptography import x509

    try:
        names = x509.load_der_x509_certificate(der).extensions.get_extension_for_class(
            x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return []
    return sorted(names.get_values_for_type(x509.DNSName))


def check_peer_names(der: bytes, address: str, name: str) -> None:
    """The certificate presented at `address` names host `name`; ValueError otherwise.
    libvirt checks a certificate against the address it called, and every host's is good
    for its own: a host that lies about its address would send its peer (a fence, a
    guest) to another host's libvirtd. So the peer must also be the host it is meant to
    be: the one check, for every caller of a peer's libvirtd."""
    names = certificate_host_names(der)
    if name not in names:
        raise ValueError(f"the libvirtd at {address} presents a certificate for "
                         f"{', '.join(names) or 'no host name'}, not for {name}")


def verify_peer(address: str, pki_dir: str | Path, name: str, timeout: float = 10.0,
                port: int = LIBVIRT_TLS_PORT) -> None:
    """Before libvirt is opened on a peer: its libvirtd at `address` presents a certificate
    of our CA (pki_dir's cacert.pem; ours, clientcert.pem, is presented as libvirt does)
    for host `name` (`check_peer_names`). ValueError with the reason in one line;
    OSError when it does not answer."""
    import socket
    import ssl

    pki = Path(pki_dir)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # libvirt checks the address; the name is checked here
    try:
        context.load_verify_locations(pki / "cacert.pem")
        context.load_cert_chain(pki / "clientcert.pem", pki / "clientkey.pem")
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"our libvirt certificates in {pki}: {exc}") from None
    host = check_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw, \
                context.wrap_socket(raw) as tls:
            der = tls.getpeercert(binary_form=True)
    except ssl.SSLCertVerificationError as exc:
        raise ValueError(f"the libvirtd at {address}: certificate refused "
                         f"({exc.verify_message})") from None
    except ssl.SSLError as exc:
        raise ValueError(f"the libvirtd at {address}: TLS failed ({exc.reason})") from None
    if not der:
        raise ValueError(f"the libvirtd at {address} presented no certificate")
    check_peer_names(der, address, name)


@dataclass(frozen=True)
class Target:
    """What a destination made ready for one incoming guest, as it tells the source."""

    address: str          # its libvirtd (TLS) and the migration streams
    instance_dir: str     # where the guest's files live there
    base_sha256: str | None   # the base image its overlay is on (None: no base)
    dhcp_server: str | None = None   # its network's gateway (the guest's filter parameter)
    network: str | None = None       # its guests' network (None: no network NIC there)

    def __post_init__(self) -> None:
        check_address(self.address)
        if not Path(self.instance_dir).is_absolute() or ".." in Path(self.instance_dir).parts:
            raise ValueError(f"instance_dir {self.instance_dir!r}: not an absolute path")
        if self.base_sha256 is not None and not _SHA256.match(self.base_sha256):
            raise ValueError("base_sha256: not a sha256")
        if self.dhcp_server is not None:
            ipaddress.ip_address(self.dhcp_server)
        if self.network is not None and not _NETWORK_NAME.match(self.network):
            raise ValueError(f"network {self.network!r}: not a network name")

    def to_dict(self) -> dict[str, Any]:
        return {"address": self.address, "instance_dir": self.instance_dir,
                "base_sha256": self.base_sha256, "dhcp_server": self.dhcp_server,
                "network": self.network}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Target:
        """From a message another host wrote: exactly these keys, checked (ValueError)."""
        if not isinstance(data, dict) or set(data) != set(_TARGET_KEYS):
            raise ValueError(f"a migration target needs {', '.join(_TARGET_KEYS)}")
        if not all(isinstance(v, str) or v is None for v in data.values()):
            raise ValueError("a migration target's values are strings")
        return cls(**data)


@dataclass(frozen=True)
class Limits:
    """The bound on one live migration (driver.libvirt.migration)."""

    max_downtime_ms: int = 500
    seconds_per_gib: float = 60.0
    min_seconds: float = 60.0
    on_timeout: str = "pause"
    bandwidth_mib: int = 0  # per second; 0: as fast as the network goes

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> Limits:
        return cls(int(settings["max_downtime_ms"]),
                   float(settings["completion_seconds_per_gib"]),
                   float(settings["completion_min_seconds"]), settings["on_timeout"],
                   int(settings["bandwidth_mib_per_second"]))

    def completion_timeout(self, data_total: int) -> float:
        return max(self.min_seconds, self.seconds_per_gib * data_total / GIB)


def local_disks(xml: str) -> list[str]:
    """Target devices of the guest's writable file disks: the ones to copy (not the
    read-only config drive)."""
    disks = []
    for disk in ET.fromstring(xml).iterfind("devices/disk"):
        target = disk.find("target")
        if disk.get("type") == "file" and disk.find("readonly") is None and \
                target is not None and target.get("dev"):
            disks.append(target.get("dev"))
    return disks


def destination_xml(xml: str, source_dir: Path, target: Target,
                    guest_ip: str | None = None) -> str:
    """The domain as the destination runs it: every file under the instance's directory
    here (disks, config drive, console log) under its directory there, its NIC on that
    host's network, its filter's DHCP server that host's; all else (MAC, devices,
    addresses) unchanged. With `guest_ip`, the filter is bound to the address the guest
    has now (the live definition: the destination has not seen its DHCP, so it could not
    learn it, and would drop its traffic until the guest renewed its lease)."""
    root = ET.fromstring(xml)
    source, there = str(source_dir).rstrip("/") + "/", target.instance_dir.rstrip("/") + "/"
    for element in root.iter():
        if element.tag in ("source", "log") and element.get("file", "").startswith(source):
            element.set("file", there + element.get("file", "")[len(source):])
    for nic in root.iterfind("devices/interface[@type='network']"):
        source_element = nic.find("source")
        if source_element is not None and target.network:
            source_element.set("network", target.network)
        filterref = nic.find("filterref")
        if filterref is None:
            continue
        for parameter in filterref.findall("parameter"):
            if parameter.get("name") == "DHCPSERVER" and target.dhcp_server:
                parameter.set("value", target.dhcp_server)
            if parameter.get("name") == "IP":
                filterref.remove(parameter)
        if guest_ip:
            ET.SubElement(filterref, "parameter", name="IP",
                          value=str(ipaddress.IPv4Address(guest_ip)))
    return ET.tostring(root, encoding="unicode")


def migration_params(target: Target, xml: str, disks: list[str],
                     limits: Limits | None = None,
                     persistent_xml: str | None = None) -> dict[str, Any]:
    """migrateToURI3's parameters: the streams to the target's address (not the host name
    its libvirtd would give), the destination's definition (what runs; what stays
    defined, if different), the disks to copy."""
    address = check_address(target.address)
    host = f"[{address}]" if ":" in address else address
    params: dict[str, Any] = {
        libvirt.VIR_MIGRATE_PARAM_URI: f"tcp://{host}",
        libvirt.VIR_MIGRATE_PARAM_LISTEN_ADDRESS: address,
        libvirt.VIR_MIGRATE_PARAM_DEST_XML: xml,
        libvirt.VIR_MIGRATE_PARAM_PERSIST_XML: persistent_xml or xml,
        libvirt.VIR_MIGRATE_PARAM_MIGRATE_DISKS: disks,
    }
    if limits is not None and limits.bandwidth_mib:
        params[libvirt.VIR_MIGRATE_PARAM_BANDWIDTH] = limits.bandwidth_mib
    return params


def progress_of(stats: dict[str, Any]) -> dict[str, Any]:
    """The part of libvirt's job statistics an operator reads: elapsed time, bytes."""
    total = int(stats.get("data_total") or 0)
    remaining = int(stats.get("data_remaining") or 0)
    return {
        "elapsed_ms": int(stats.get("time_elapsed") or 0),
        "data_total": total,
        "data_processed": int(stats.get("data_processed") or 0),
        "data_remaining": remaining,
        "memory_iteration": int(stats.get("memory_iteration") or 0),
        # The local disks' copy (the first part of a block migration).
        "disk_total": int(stats.get("disk_total") or 0),
        "disk_processed": int(stats.get("disk_processed") or 0),
        "percent": round(100.0 * (total - remaining) / total, 1) if total else 0.0,
    }


class LibvirtCall:
    """One libvirt call in a daemon thread of its own, so that whoever asked can stop
    waiting for it. libvirtd holds a call while it waits for the domain's job (30 s) or for
    qemu's answer (no limit); libvirt 9.0's client holds a call queued behind another
    thread's long call on the same connection until that one returns (the wake-up of the
    thread polling the socket can be lost)."""

    def __init__(self, what: str, function: Callable[[], Any]) -> None:
        self.what = what
        self.result: Any = None
        self.error: Exception | None = None
        self.answered = threading.Event()
        threading.Thread(target=self._run, args=(function,), name=f"libvirt-{what}",
                         daemon=True).start()

    def _run(self, function: Callable[[], Any]) -> None:
        try:
            self.result = function()
        except Exception as exc:  # noqa: BLE001 (the asker reads it)
            self.error = exc
        finally:
            self.answered.set()


@dataclass
class Supervisor:
    """Watches one outgoing migration from a thread of its own while the caller's thread
    is in migrateToURI3: reports progress, applies the bound, and cancels when
    `cancelled()` says so, whatever one libvirt call does.

    `domain` is best on a connection of its own (the driver opens one, with a keepalive):
    on the migration's connection libvirt's client can hold the supervisor's calls until
    the migration ends. Each look at the job and each action is a `LibvirtCall` the loop
    waits for at most `answer_seconds`, and never asks twice at once: the bound runs on the
    clock, from `data_total` (memory and disks to copy, known before the move) or libvirt's
    figure once it answers. An abort that fails is asked again at the next look; if the
    job still runs `last_resort_seconds` after the first, `last_resort` is called once
    (the driver ends the move from the destination's side)."""

    domain: Any
    limits: Limits
    progress: Callable[[dict[str, Any]], None] | None = None
    cancelled: Callable[[], bool] = lambda: False
    data_total: int = 0
    last_resort: Callable[[], None] | None = None
    poll_seconds: float = 0.5
    answer_seconds: float = 1.0
    last_resort_seconds: float = 60.0
    # At the end, how long a pause or abort still on its way is waited for (libvirtd gives
    # up waiting for the domain's job after 30 s): one landing later would pause a guest
    # that the caller has already found running, or cancel a retry.
    settle_seconds: float = 35.0
    clock: Callable[[], float] = time.monotonic
    paused_at: float | None = None
    aborted: str | None = None
    aborted_at: float | None = None
    abort_taken: bool = False
    gave_up: bool = False
    last: dict[str, Any] = field(default_factory=dict)
    _calls: dict[str, LibvirtCall] = field(default_factory=dict)
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Supervisor:
        self.started = self.clock()
        self._thread = threading.Thread(target=self._run, name="migration-supervisor",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        self.settle()

    def _run(self) -> None:
        while not self._done.wait(self.poll_seconds):
            self.step()

    def bound(self) -> float:
        return self.limits.completion_timeout(
            max(self.data_total, int(self.last.get("data_total") or 0)))

    def step(self) -> None:
        """One look at the job (progress, when libvirt answers in time), then the bound."""
        answered, stats = self._ask("jobStats", self.domain.jobStats)
        if answered:
            if stats.get("type", libvirt.VIR_DOMAIN_JOB_NONE) == libvirt.VIR_DOMAIN_JOB_NONE:
                return  # not begun, or over: migrateToURI3 says how
            self.last = progress_of(stats)
            if self.progress is not None:
                self.progress(self.last)
        elapsed = self.clock() - self.started
        bound = self.bound()
        if self.cancelled():
            self._abort("cancelled", elapsed)
        elif elapsed > 2 * bound:
            self._abort(f"not complete after {elapsed:.0f}s (twice the {bound:.0f}s bound)",
                        elapsed)
        elif elapsed > bound and self.limits.on_timeout == "abort":
            self._abort(f"not complete within the {bound:.0f}s bound", elapsed)
        elif elapsed > bound and self.paused_at is None:
            # Nothing new is dirtied while paused: what is left crosses once.
            if self._ask("suspend", self.domain.suspend)[0]:
                self._paused(elapsed, bound)

    def settle(self) -> None:
        """After the migration returned: a pause or abort asked and not answered yet is
        waited for (a bounded time), so what the caller then finds stays so."""
        for what in ("suspend", "abortJob", "last-resort"):
            call = self._calls.get(what)
            if call is None:
                continue
            if not call.answered.wait(self.settle_seconds):
                log.error("instance %s: libvirt has not answered %s for %.0fs", self._name(),
                          what, self.settle_seconds)
            elif what == "suspend" and call.error is None and self.paused_at is None:
                self._paused(self.clock() - self.started, self.bound())

    def _paused(self, elapsed: float, bound: float) -> None:
        self.paused_at = elapsed
        log.warning("instance %s: migration not complete within %.0fs: paused to finish",
                    self._name(), bound)

    def _abort(self, why: str, elapsed: float) -> None:
        if self.aborted is None:
            self.aborted, self.aborted_at = why, elapsed
            log.warning("instance %s: migration cancelled: %s", self._name(), why)
        if not self.abort_taken:  # asked again at each look until libvirt takes it
            self.abort_taken = self._ask("abortJob", self.domain.abortJob)[0]
        if self.last_resort is not None and not self.gave_up and \
                elapsed - (self.aborted_at or 0.0) > self.last_resort_seconds:
            self.gave_up = True
            log.error("instance %s: migration still running %.0fs after it was cancelled: "
                      "ending it from the destination's side", self._name(),
                      elapsed - (self.aborted_at or 0.0))
            self._calls["last-resort"] = LibvirtCall("last-resort", self.last_resort)

    def _ask(self, what: str, function: Callable[[], Any]) -> tuple[bool, Any]:
        """(True, its result) when libvirt answered `what` within `answer_seconds`; (False,
        None) when it failed (logged) or is still on its way (asked once at a time)."""
        call = self._calls.get(what)
        if call is None:
            call = self._calls[what] = LibvirtCall(what, function)
        if not call.answered.wait(self.answer_seconds):
            return False, None
        del self._calls[what]
        if call.error is not None:
            log.debug("migration supervisor: %s: %s", what, call.error)
            return False, None
        return True, call.result

    def _name(self) -> str:
        try:
            return str(self.domain.name())
        except Exception:  # noqa: BLE001 (only for a log line)
            return "?"
