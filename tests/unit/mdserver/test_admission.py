"""mdserver/admission.py: the per-source accounting, and a waitress server that keeps to it.

The server tests run a real waitress server in this process on 127.0.0.1 (its loop in a
thread); sources are loopback addresses of their own (127.0.0.2, 127.0.0.3: all of
127/8 is loopback). Across network namespaces, and with the other source's answer
timed, in tests/virt/test_mdserver_fairness.py.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from waitress import wasyncore

from etcd_compute.mdserver import server as mdserver
from etcd_compute.mdserver.admission import REFUSAL_LOG_SECONDS, PerSourceAdmission, SourceCounts
from etcd_compute.mdserver.settings import MdserverConfig
from tests.support import wait_for

A, B = "127.0.0.2", "127.0.0.3"


# -- the accounting -------------------------------------------------------------------------


def test_each_source_has_its_own_cap():
    counts = SourceCounts(2)
    for _ in range(2):
        assert counts.admits(A)
        counts.opened(A)
    assert not counts.admits(A)  # at its cap
    assert counts.admits(B)  # another source is not charged for A's
    counts.opened(B)
    assert counts.sources() == {A: 2, B: 1}


def test_a_closed_connection_gives_its_slot_back_and_idle_sources_are_forgotten():
    counts = SourceCounts(1)
    counts.opened(A)
    assert not counts.admits(A)
    counts.closed(A)
    assert counts.admits(A) and counts.held(A) == 0
    assert counts.sources() == {}  # nothing kept for a source with no connection


def test_a_cap_is_at_least_one():
    with pytest.raises(ValueError, match="at least 1"):
        SourceCounts(0)


def test_refusals_are_logged_once_then_at_most_every_interval(caplog):
    now = [100.0]
    counts = SourceCounts(1, clock=lambda: now[0])
    counts.opened(A)
    with caplog.at_level(logging.WARNING, logger="etcd_compute.mdserver"):
        for _ in range(50):  # a guest knocking in a loop
            assert not counts.admits(A)
        now[0] += REFUSAL_LOG_SECONDS
        assert not counts.admits(A)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"{A} holds 1 connections, its cap (connections_per_guest): closed 1 more at once",
        f"{A} holds 1 connections, its cap (connections_per_guest): closed 50 more at once",
    ]


def test_refusals_not_yet_logged_are_logged_when_the_sources_last_connection_closes(caplog):
    """92 refused in a burst, then the source let go: once only the first was ever logged,
    the other 91 forgotten with the source."""
    now = [100.0]
    counts = SourceCounts(1, clock=lambda: now[0])
    counts.opened(A)
    with caplog.at_level(logging.WARNING, logger="etcd_compute.mdserver"):
        for _ in range(92):
            assert not counts.admits(A)
        now[0] += 1.0  # well within REFUSAL_LOG_SECONDS
        counts.closed(A)
        counts.opened(A)  # a new episode starts from nothing
        counts.closed(A)
    lines = [record.getMessage() for record in caplog.records]
    assert lines == [
        f"{A} holds 1 connections, its cap (connections_per_guest): closed 1 more at once",
        f"{A} holds no connection now: closed 91 more at once since the last warning, 92 in "
        "all while at its cap (connections_per_guest)",
    ]
    assert counts.sources() == {}


# -- a real waitress server keeping to it ---------------------------------------------------


class Running:
    """A metadata server (mdserver.create_server) on 127.0.0.1, its loop in a thread."""

    def __init__(self, config: MdserverConfig):
        self.sock = mdserver.listening_socket(config)
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.server = mdserver.create_server(config, self.sock)
        self.counts: SourceCounts = self.server.channel_class.counts
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.stopping.is_set():
            wasyncore.loop(timeout=0.02, map=self.server._map, use_poll=True, count=1)

    def connect(self, source: str) -> socket.socket:
        connection = socket.socket()
        connection.bind((source, 0))
        connection.settimeout(5)
        connection.connect(("127.0.0.1", self.port))
        return connection

    def by_source(self) -> dict[str, int]:
        """The sources of the channels waitress holds (what the counts must agree with)."""
        found: dict[str, int] = {}
        for channel in list(self.server.active_channels.values()):
            found[channel.addr[0]] = found.get(channel.addr[0], 0) + 1
        return found

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=5)
        self.server.task_dispatcher.shutdown()
        wasyncore.close_all(self.server._map)
        self.sock.close()


@pytest.fixture
def running() -> Iterator[Running]:
    config = MdserverConfig(bind_address="127.0.0.1", port=0, libvirt_uri="test:///default",
                            network="none", connections_per_guest=2, connection_limit=10)
    server = Running(config)
    try:
        yield server
    finally:
        server.stop()


def closed_by_server(connection: socket.socket, within: float = 2.0) -> bool:
    connection.settimeout(within)
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def closed_already(connection: socket.socket) -> bool:
    """Whether the server has closed `connection` (looked at without waiting)."""
    connection.settimeout(0)
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def ask(running: Running, source: str) -> bytes:
    with running.connect(source) as connection:
        connection.sendall(b"GET /latest/meta-data/instance-id HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := connection.recv(4096):
            answer += chunk
    return answer


def test_the_server_installs_per_source_admission_with_the_configured_cap(running):
    assert isinstance(running.server.channel_class, PerSourceAdmission)
    assert running.counts.per_source == 2
    assert running.server.adj.asyncore_use_poll is True  # descriptors past 1024


def test_a_source_at_its_cap_has_more_connections_closed_at_once(running):
    held = [running.connect(A) for _ in range(2)]
    wait_for(lambda: running.counts.held(A) == 2, 5, what="A's two connections")
    extra = [running.connect(A) for _ in range(3)]
    try:
        started = time.monotonic()
        assert all(closed_by_server(connection) for connection in extra)
        assert time.monotonic() - started < 2  # at once, not after an idle timeout
        # Another source is served meanwhile, and the counts are what waitress holds.
        assert ask(running, B).startswith(b"HTTP/1.0 404 ")
        assert running.counts.sources() == running.by_source() == {A: 2}
        assert not any(closed_already(connection) for connection in held)
    finally:
        for connection in held + extra:
            connection.close()


def test_a_connection_closed_by_its_guest_gives_its_slot_back(running):
    first, second = running.connect(A), running.connect(A)
    wait_for(lambda: running.counts.held(A) == 2, 5, what="A's two connections")
    first.close()
    wait_for(lambda: running.counts.held(A) == 1, 5, what="the slot to come back")
    third = running.connect(A)
    try:
        wait_for(lambda: running.by_source() == {A: 2}, 5, what="the third to be admitted")
        assert running.counts.sources() == {A: 2} and not closed_already(third)
    finally:
        second.close()
        third.close()
    wait_for(lambda: running.counts.sources() == {}, 5, what="every slot to come back")


def test_answered_connections_give_their_slots_back(running):
    for _ in range(5):  # more than the cap, one after another: each closes after its answer
        assert ask(running, A).startswith(b"HTTP/1.0 404 ")
    wait_for(lambda: running.counts.sources() == {}, 5, what="every slot to come back")


def test_a_connection_lost_as_it_is_accepted_is_forgotten(monkeypatch, running):
    """waitress would let the error take the listening socket down; one connection goes."""
    admission = running.server.channel_class

    def reset(*_args: Any, **_kwargs: Any) -> None:
        raise ConnectionResetError(104, "Connection reset by peer")

    monkeypatch.setattr("etcd_compute.mdserver.admission._CountedChannel", reset)
    closed: list[bool] = []

    class Sock:
        def close(self) -> None:
            closed.append(True)

    assert admission(running.server, Sock(), (A, 1234), running.server.adj) is None
    assert closed == [True] and running.counts.sources() == {}
