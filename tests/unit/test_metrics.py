"""The shared metrics plumbing: which listen addresses are refused, the backend tallies, and
the HTTP server that exports them."""

from __future__ import annotations

import threading
import urllib.request

import pytest

from etcd_compute import config as configuration
from etcd_compute import defaults, metrics
from etcd_compute.errors import (
    ConfigError,
    EtcdUnavailable,
    PlacementUnavailable,
    ServiceUnavailable,
)
from tests.support import stop_server
from tools.local_services import free_port

KEY = "compute.metrics_listen"


@pytest.mark.parametrize(("value", "host", "port"), [
    ("127.0.0.1:9180", "127.0.0.1", 9180),
    ("localhost:9180", "127.0.0.1", 9180),
    ("LOCALHOST:1", "127.0.0.1", 1),
    ("10.0.0.1:65535", "10.0.0.1", 65535),
    ("[::1]:9180", "::1", 9180),
    ("[2001:db8::7]:9100", "2001:db8::7", 9100),
    (" 192.0.2.4:80 ", "192.0.2.4", 80),
])
def test_an_ip_address_and_port_are_accepted(value, host, port):
    assert metrics.parse_listen(value, KEY) == metrics.Listen(host, port)


def test_null_means_off():
    assert metrics.parse_listen(None, KEY) is None


def test_the_listen_address_prints_as_it_is_written():
    assert str(metrics.Listen("127.0.0.1", 9180)) == "127.0.0.1:9180"
    assert str(metrics.Listen("::1", 9180)) == "[::1]:9180"


@pytest.mark.parametrize(("value", "why"), [
    ("9180", "expected HOST:PORT"),
    (":9180", "expected HOST:PORT"),
    ("127.0.0.1:", "port must be a number"),
    ("127.0.0.1:0", "port must be a number"),
    ("127.0.0.1:65536", "port must be a number"),
    ("127.0.0.1:-1", "port must be a number"),
    ("::1:9180", "IPv6 address in brackets"),
    ("metrics.example.org:9180", "must be an IP address"),
    ("0.0.0.0:9180", "listens on every address of the host"),
    ("[::]:9180", "listens on every address of the host"),
    ("169.254.169.254:80", "link-local"),
    ("169.254.1.1:9180", "link-local"),
    ("[fe80::1]:9180", "link-local"),
])
def test_refused_addresses_are_one_line_config_errors_naming_the_key(value, why):
    with pytest.raises(ConfigError) as caught:
        metrics.parse_listen(value, KEY)
    text = str(caught.value)
    assert text.startswith(f"{KEY} {value!r}: ") and why in text and "\n" not in text


def test_the_wildcard_says_how_to_allow_it_and_is_allowed_when_said():
    with pytest.raises(ConfigError, match="set compute.metrics_allow_any_address: true"):
        metrics.parse_listen("0.0.0.0:9180", KEY)
    assert metrics.parse_listen("0.0.0.0:9180", KEY, allow_any_address=True) == \
        metrics.Listen("0.0.0.0", 9180)
    assert metrics.parse_listen("[::]:9180", KEY, allow_any_address=True) == \
        metrics.Listen("::", 9180)


def test_link_local_stays_refused_even_when_any_address_is_allowed():
    with pytest.raises(ConfigError, match="link-local"):
        metrics.parse_listen("169.254.169.254:9180", KEY, allow_any_address=True)


def test_an_address_in_the_guests_network_is_refused():
    with pytest.raises(ConfigError, match=r"in the guests' network 192\.168\.123\.0/24"):
        metrics.parse_listen("192.168.123.1:9180", KEY, guest_networks=["192.168.123.0/24"])
    # Next to it is fine, and an IPv6 address is not "in" an IPv4 network.
    assert metrics.parse_listen("192.168.124.1:9180", KEY, guest_networks=["192.168.123.0/24"])
    assert metrics.parse_listen("[::1]:9180", KEY, guest_networks=["192.168.123.0/24"])
    # A malformed network is the driver's to refuse, not a reason to refuse every address.
    assert metrics.parse_listen("127.0.0.1:9180", KEY, guest_networks=["not a network"])


def test_listen_of_reads_each_daemons_section_and_the_computes_guest_network():
    compute = configuration.deep_merge(defaults.COMPUTE_DEFAULTS, {
        "compute": {"metrics_listen": "10.1.2.3:9180"},
        "driver": {"libvirt": {"network_cidr": "10.1.2.0/24"}}})
    with pytest.raises(ConfigError, match=r"compute\.metrics_listen '10\.1\.2\.3:9180'"):
        metrics.listen_of(compute, "compute")
    schedule = configuration.deep_merge(defaults.SCHEDULE_DEFAULTS, {
        "scheduler": {"metrics_listen": "10.1.2.3:9181"}})
    assert metrics.listen_of(schedule, "scheduler") == metrics.Listen("10.1.2.3", 9181)
    with pytest.raises(ConfigError, match="set scheduler.metrics_allow_any_address: true"):
        metrics.listen_of(configuration.deep_merge(schedule, {
            "scheduler": {"metrics_listen": "0.0.0.0:9181"}}), "scheduler")
    assert metrics.listen_of(defaults.SCHEDULE_DEFAULTS, "scheduler") is None


def test_the_default_is_off_for_both_daemons():
    assert defaults.COMPUTE_DEFAULTS["compute"]["metrics_listen"] is None
    assert defaults.SCHEDULE_DEFAULTS["scheduler"]["metrics_listen"] is None


# --- tallies --------------------------------------------------------------------------------


def test_a_tally_counts_by_label_values_from_many_threads():
    tally = metrics.Tally("t", "doc", ("service",), seed=[("etcd",)])
    assert tally.items() == [(("etcd",), 0.0)]

    def add() -> None:
        for _ in range(1000):
            tally.add("placement")

    threads = [threading.Thread(target=add) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tally.value("placement") == 8000
    assert tally.value("etcd") == 0 and tally.value("nothing") == 0
    with pytest.raises(AssertionError):
        tally.add("etcd", "extra")


@pytest.mark.parametrize(("exc", "service"), [
    (EtcdUnavailable("etcd down"), "etcd"),
    (PlacementUnavailable("placement down"), "placement"),
    (ServiceUnavailable("metadata server did not start"), "other"),
    (ConnectionError("a raw error from an etcd stream"), "etcd"),
])
def test_each_error_is_counted_against_its_backend(exc, service):
    assert metrics.service_of(exc) == service


def test_a_retry_counts_once_and_a_raw_error_counts_as_an_error_too():
    errors_before = metrics.BACKEND_ERRORS.value("etcd")
    retries_before = metrics.BACKEND_RETRIES.value("etcd", "watch")
    # Ours was counted where it was raised (the store's wrapper): only the retry here.
    metrics.retried("watch", EtcdUnavailable("etcd at x is unreachable"))
    assert metrics.BACKEND_ERRORS.value("etcd") == errors_before
    assert metrics.BACKEND_RETRIES.value("etcd", "watch") == retries_before + 1
    # pyetcd's own (a watch stream's) was not: counted here, once.
    metrics.retried("watch", RuntimeError("stream broke"))
    assert metrics.BACKEND_ERRORS.value("etcd") == errors_before + 1
    assert metrics.BACKEND_RETRIES.value("etcd", "watch") == retries_before + 2


# --- serving --------------------------------------------------------------------------------


@pytest.fixture
def served():
    servers = []

    def serve(listen: metrics.Listen):
        server = metrics.serve(listen, KEY)
        servers.append(server)
        return server

    yield serve
    for server in servers:
        stop_server(server)


def test_serve_exports_the_tallies_and_refuses_a_taken_port_in_one_line(served):
    port = free_port()
    served(metrics.Listen("127.0.0.1", port))
    metrics.backend_error("placement")
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    line = next(line for line in text.splitlines()
                if line.startswith('etcd_compute_backend_errors_total{service="placement"}'))
    assert float(line.split()[-1]) == metrics.BACKEND_ERRORS.value("placement") >= 1
    assert 'etcd_compute_backend_errors_total{service="etcd"}' in text
    assert "# TYPE etcd_compute_backend_retries_total counter" in text
    with pytest.raises(ConfigError) as caught:
        served(metrics.Listen("127.0.0.1", port))
    assert str(caught.value) == (f"{KEY} 127.0.0.1:{port}: cannot listen "
                                 "(Address already in use)")


def test_serving_twice_registers_the_tallies_once(served):
    first, second = free_port(), free_port()
    served(metrics.Listen("127.0.0.1", first))
    served(metrics.Listen("127.0.0.1", second))
    text = urllib.request.urlopen(f"http://127.0.0.1:{second}/metrics", timeout=5).read().decode()
    assert text.count("# TYPE etcd_compute_backend_errors_total counter") == 1
