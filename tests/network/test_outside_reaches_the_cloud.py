"""The laptop outside the cloud (tools/local_services/outside.py) reaches the cloud's API on
this machine's loopback, as Tempest run there for its scenario tests must (the API and the
floating IPs both in its reach): `Outside.reach(ports)` answers at the laptop's own
127.0.0.1 on the same ports, so the catalog's endpoints and their certificates hold.

The untrusted side: the segment is where guests' floating IPs and provider ports are, so
nothing is served on it: a machine on the segment (a guest, here a namespace on the
segment's bridge) finds the forwarded port closed at the laptop's address, and the laptop
reaches no loopback port of this machine that was not asked for."""

from __future__ import annotations

import http.server
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from etcd_compute.errors import ServiceUnavailable
from tests.support import unavailable
from tools.local_services.netns import listen_in, netns_usable
from tools.local_services.outside import Outside
from tools.local_services.process import free_port


@pytest.fixture
def outside() -> Iterator[Outside]:
    why = netns_usable()
    if why:
        unavailable(why)
    with Outside.create([]) as made:
        yield made


@pytest.fixture
def api() -> Iterator[int]:
    """An HTTP service on this machine's loopback (the compute API's stand-in)."""

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            body = b'{"versions": []}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _curl(outside: Outside, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(outside.run(["curl", "-sS", "--max-time", "5", url]),
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_laptop_reaches_the_api_at_its_own_loopback(outside: Outside, api: int):
    before = _curl(outside, f"http://127.0.0.1:{api}/")
    assert before.returncode != 0  # the laptop's loopback is its own
    outside.reach([api])
    outside.reach([api])  # asked twice: one forwarder
    assert len(outside.forwarders) == 1
    for _ in range(3):
        answer = _curl(outside, f"http://127.0.0.1:{api}/")
        assert (answer.returncode, answer.stdout) == (0, '{"versions": []}'), answer.stderr


def test_nothing_is_served_on_the_segment_nor_what_was_not_asked(outside: Outside, api: int):
    outside.reach([api])
    guest = outside.net.add_host("guest")  # a machine on the segment, as a guest is
    probe = subprocess.run(outside.net.run_in(guest, [
        "curl", "-sS", "--max-time", "5", f"http://{outside.address}:{api}/"]),
        capture_output=True, text=True, timeout=30, check=False)
    assert probe.returncode == 7, probe  # curl's "could not connect": the port is closed
    # The laptop is there (closed, not unreachable): a port it does serve on the segment.
    with listen_in(outside.laptop.netns, outside.address, 0) as served:
        reached = subprocess.run(outside.net.run_in(guest, [
            sys.executable, "-c", "import socket, sys; "
            "socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)",
            outside.address, str(served.getsockname()[1])]),
            capture_output=True, text=True, timeout=30, check=False)
    assert reached.returncode == 0, reached.stderr
    with socket.create_server(("127.0.0.1", 0)) as other:  # served here, never asked for
        other_port = other.getsockname()[1]
        assert _curl(outside, f"http://127.0.0.1:{other_port}/").returncode != 0
    assert _curl(outside, f"http://127.0.0.1:{free_port()}/").returncode != 0


def test_closing_stops_the_forwarders(api: int):
    why = netns_usable()
    if why:
        unavailable(why)
    with Outside.create([]) as made:
        made.reach([api])
        forwarder = made.forwarders[0]
    assert made.forwarders == []
    with pytest.raises(OSError):
        forwarder._listener.getsockname()  # noqa: SLF001 (closed)


def test_a_namespace_that_is_not_there_is_one_line():
    with pytest.raises(ServiceUnavailable, match="in namespace ec-none-such: "):
        listen_in("ec-none-such", "127.0.0.1", 0)
