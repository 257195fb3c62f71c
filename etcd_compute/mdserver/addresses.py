"""A guest's addresses for its EC2-style metadata, as Nova's metadata answers them:
`local-ipv4`, the fixed address the guest asks from (in signed mode the one Neutron's agent
names in X-Forwarded-For, in lease mode the request's source), and `public-ipv4`, the
floating IP on the port that holds it: asked of Neutron at request time (one list of the
instance's ports, one of their floating IPs), with the compute's Neutron credential
(mdserver.conf `compute_config`), and kept CACHE_SECONDS per instance and address so a guest
asking in a loop does not become as many Neutron requests (Nova caches its metadata 15 s).
"" when there is none, or no credential, or Neutron does not answer (then not kept).
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from etcd_compute.errors import EtcdComputeError
from etcd_compute.neutron import floating_addresses

log = logging.getLogger("etcd_compute.mdserver")

CACHE_SECONDS = 5.0


def ipv4_or_empty(text: str) -> str:
    """`text` if it is one IPv4 address, "" otherwise (a header is anyone's words)."""
    try:
        return str(ipaddress.IPv4Address(text.strip()))
    except ValueError:
        return ""


class PublicAddresses:
    """Instance uuid and fixed address -> the floating IP on its port, from Neutron."""

    def __init__(self, neutron: Callable[[], Any] | None,
                 now: Callable[[], float] = time.monotonic):
        """`neutron`: makes the Neutron client when first needed; None: no credential."""
        self._make = neutron
        self._client: Any = None
        self.now = now
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], tuple[float, str]] = {}

    def public_ipv4(self, uuid: str, fixed_ip: str) -> str:
        if self._make is None or not fixed_ip:
            return ""
        with self._lock:
            kept = self._cache.get((uuid, fixed_ip))
            if kept and self.now() - kept[0] < CACHE_SECONDS:
                return kept[1]
        try:
            found = self._ask(uuid, fixed_ip)
        except EtcdComputeError as exc:
            log.warning("public-ipv4 of %s: %s", uuid, exc)
            return ""
        with self._lock:
            now = self.now()
            self._cache = {key: value for key, value in self._cache.items()
                           if now - value[0] < CACHE_SECONDS}
            self._cache[(uuid, fixed_ip)] = (now, found)
        return found

    def _neutron(self) -> Any:
        """The one Neutron client, made by the first request that needs it."""
        with self._lock:
            if self._client is None:
                self._client = self._make()  # type: ignore[misc]
            return self._client

    def _ask(self, uuid: str, fixed_ip: str) -> str:
        client = self._neutron()
        ports = [port["id"] for port in client.ports(device_id=uuid)
                 if any(ip.get("ip_address") == fixed_ip for ip in port.get("fixed_ips", []))]
        floating = floating_addresses(client, ports)
        return next((address for port in ports for address in floating.get(port, [])), "")
