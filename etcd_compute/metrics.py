"""Metrics plumbing both daemons share: the listen address, the HTTP server, backend errors.

Low in the layers (the store and the Placement client count their errors
here) and free of prometheus_client until a daemon serves metrics: the
command-line programs never import it. The daemons' own metrics are in
`compute/metrics.py` and `controller/metrics.py`; docs/reference/metrics.md lists them.

The listen address is the operator's decision and is off by default
(`compute.metrics_listen`, `scheduler.metrics_listen`: null). It must be an IP
address (or `localhost`), never a name that could resolve anywhere. It is
refused on the guests' side: link-local addresses (169.254.0.0/16, where the
metadata server answers guests, and fe80::/10) and, for a compute, its
guests' NAT network (`driver.libvirt.network_cidr`). The wildcard (0.0.0.0,
::) listens on every interface a host has, the guests' bridges included, so
it is refused unless `metrics_allow_any_address: true` says a firewall (or
the guests' network filter) keeps guests and tenants off it.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from etcd_compute.errors import (
    ConfigError,
    EtcdUnavailable,
    GlanceUnavailable,
    NeutronUnavailable,
    PlacementUnavailable,
    ServiceUnavailable,
)

LOG = logging.getLogger("etcd_compute.metrics")

# --- counts that need no prometheus_client ------------------------------------------------


class Tally:
    """A thread-safe counter by label values, exported as a Prometheus counter by `serve`."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...],
                 seed: Iterable[tuple[str, ...]] = ()):
        self.name, self.documentation, self.labels = name, documentation, labels
        self._lock = threading.Lock()
        # Seeded series exist (at 0) from the start, so a rate over them is never empty.
        self._counts: dict[tuple[str, ...], float] = {values: 0.0 for values in seed}

    def add(self, *values: str) -> None:
        assert len(values) == len(self.labels), (self.labels, values)
        with self._lock:
            self._counts[values] = self._counts.get(values, 0.0) + 1

    def value(self, *values: str) -> float:
        with self._lock:
            return self._counts.get(values, 0.0)

    def items(self) -> list[tuple[tuple[str, ...], float]]:
        with self._lock:
            return sorted(self._counts.items())


SERVICES = ("etcd", "placement", "glance", "other")

BACKEND_ERRORS = Tally(
    "etcd_compute_backend_errors",
    "Requests to etcd, Placement or Glance that failed: unreachable, timed out, TLS, refused "
    "by etcd, or answered 401/403/5xx by Placement or Glance (a 409 or 404 is an answer, not "
    "an error). "
    "service=other: another backend the daemon needs (the metadata server).",
    ("service",), seed=[("etcd",), ("placement",)])

BACKEND_RETRIES = Tally(
    "etcd_compute_backend_retries",
    "Times a daemon loop retried after etcd or Placement failed, by service and loop "
    "(dispatch: an event handled again 1 s later; watch: resubscribed from the last revision; "
    "heartbeat: the lease refresh; campaign: the controller's leader election; queue: a pass "
    "of the scheduler service, again 1 s later).",
    ("service", "loop"))


def backend_error(service: str) -> None:
    """A request to `service` (etcd, placement, glance, neutron) failed; called where the
    error is raised."""
    BACKEND_ERRORS.add(service)


def service_of(exc: BaseException) -> str:
    """Which backend `exc` is about. Errors that are not ours (pyetcd's, gRPC's) come out of
    an etcd watch stream or lease, which bypass the store's error wrapper."""
    if isinstance(exc, EtcdUnavailable):
        return "etcd"
    if isinstance(exc, PlacementUnavailable):
        return "placement"
    if isinstance(exc, GlanceUnavailable):
        return "glance"
    if isinstance(exc, NeutronUnavailable):
        return "neutron"
    if isinstance(exc, ServiceUnavailable):
        return "other"
    return "etcd"


def retried(loop: str, exc: BaseException) -> None:
    """`loop` caught `exc` and will try again: count the retry (and the error itself when
    it came straight from pyetcd, so was not counted where it was raised)."""
    service = service_of(exc)
    BACKEND_RETRIES.add(service, loop)
    if not isinstance(exc, ServiceUnavailable):
        BACKEND_ERRORS.add(service)


# --- the listen address -------------------------------------------------------------------

LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_listen(value: str | None, key: str, *, allow_any_address: bool = False,
                 guest_networks: Iterable[str] = ()) -> Listen | None:
    """`value` ("HOST:PORT", "[V6]:PORT"; None: off) checked as the module docstring says;
    ConfigError naming `key` when refused."""
    if value is None:
        return None
    section = key.rsplit(".", 1)[0]

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{key} {value!r}: {why}")

    host, sep, port_text = value.strip().rpartition(":")
    if not sep or not host:
        raise refuse("expected HOST:PORT, e.g. 127.0.0.1:9180")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise refuse("put an IPv6 address in brackets, e.g. [::1]:9180")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise refuse("the port must be a number from 1 to 65535")
    try:
        address = ipaddress.ip_address("127.0.0.1" if host.lower() == "localhost" else host)
    except ValueError:
        raise refuse("HOST must be an IP address (or localhost): a name may resolve to an "
                     "address the guests can reach") from None
    if address.is_unspecified and not allow_any_address:
        raise refuse(f"{address} listens on every address of the host, the guests' networks "
                     "included; give the management (or loopback) address, or set "
                     f"{section}.metrics_allow_any_address: true where a firewall keeps guests "
                     "and tenants off it")
    if any(address in network for network in LINK_LOCAL):
        raise refuse("a link-local address is on the guests' side (the metadata server "
                     "answers them on 169.254.169.254)")
    for cidr in guest_networks:
        try:
            network = ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            continue  # the driver refuses a bad network_cidr itself
        if address.version == network.version and address in network:
            raise refuse(f"{address} is in the guests' network {cidr} "
                         "(driver.libvirt.network_cidr)")
    return Listen(str(address), int(port_text))


def listen_of(config: dict[str, Any], section: str) -> Listen | None:
    """The checked metrics address of a daemon's config (`section`: compute or scheduler)."""
    settings = config[section]
    guest_networks = []
    if section == "compute":
        guest_networks.append(config["driver"]["libvirt"]["network_cidr"])
    return parse_listen(settings.get("metrics_listen"), f"{section}.metrics_listen",
                        allow_any_address=settings.get("metrics_allow_any_address", False),
                        guest_networks=guest_networks)


# --- serving --------------------------------------------------------------------------------

_registered = threading.Lock()
_tallies_registered = False


class _TallyCollector:
    """Exposes the tallies above to prometheus_client at each scrape."""

    def __init__(self, tallies: Iterable[Tally]):
        self.tallies = list(tallies)

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily

        for tally in self.tallies:
            family = CounterMetricFamily(tally.name, tally.documentation,
                                         labels=list(tally.labels))
            for values, count in tally.items():
                family.add_metric(list(values), count)
            yield family


def register_tallies() -> None:
    """Put the backend tallies in prometheus_client's default registry (once)."""
    global _tallies_registered
    from prometheus_client import REGISTRY

    with _registered:
        if not _tallies_registered:
            REGISTRY.register(_TallyCollector([BACKEND_ERRORS, BACKEND_RETRIES]))
            _tallies_registered = True


def serve(listen: Listen, key: str) -> Any:
    """Serve the default registry on `listen` (prometheus_client.start_http_server, a daemon
    thread); the server. ConfigError (one line, naming `key`) when the address is unusable."""
    import prometheus_client

    register_tallies()
    try:
        server, _thread = prometheus_client.start_http_server(listen.port, listen.host)
    except OSError as exc:
        raise ConfigError(f"{key} {listen}: cannot listen ({exc.strerror or exc})") from None
    LOG.info("metrics on http://%s/metrics", listen)
    return server
