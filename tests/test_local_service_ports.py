"""The tests' services (tools/local_services) come up on other ports when the one they were
given is taken meanwhile: free_port() only says a port was free a moment ago. One worker's
etcd losing that race failed every test of its session once; a Keystone losing it failed
the cloud's first test (gunicorn: "Connection in use", then "Can't connect to")."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import TypeVar

import pytest
import requests

from tests.support import unavailable
from tools.local_services import KEYSTONE_VENV, KeystoneServer
from tools.local_services.etcd import EtcdServer
from tools.local_services.mariadb import MARIADBD, MariaDBServer
from tools.local_services.placement import PLACEMENT_VENV, PlacementServer
from tools.local_services.process import Service

S = TypeVar("S", bound=Service)


@pytest.fixture
def taken() -> Iterator[int]:
    """A loopback port someone else listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@contextlib.contextmanager
def started_elsewhere(server: S, taken: int) -> Iterator[S]:
    """`server`, given the `taken` port, started: it runs on another; stopped after."""
    try:
        server.start()
        assert server.port != taken and server.running()
        yield server
    finally:
        server.stop()


def test_an_etcd_whose_port_was_taken_comes_up_on_another(tmp_path, taken):
    with started_elsewhere(EtcdServer.create(tmp_path, port=taken), taken):
        pass


def test_a_placement_whose_port_was_taken_comes_up_on_another(tmp_path, taken):
    if not (PLACEMENT_VENV / "bin" / "gunicorn").exists():
        unavailable("Placement is not installed (make install)")
    with started_elsewhere(PlacementServer.create(tmp_path, port=taken), taken) as server:
        assert requests.get(server.endpoint + "/", timeout=5).ok


def test_a_keystone_whose_port_was_taken_comes_up_on_another_and_names_it(tmp_path, taken):
    if not (KEYSTONE_VENV / "bin" / "gunicorn").exists():
        unavailable("Keystone is not installed (make install)")
    with started_elsewhere(KeystoneServer.create(tmp_path, port=taken), taken) as server:
        # Its endpoints set once it listened (bootstrap, or the template's adopted): its
        # catalog names the port it got.
        session = server.session()
        catalog = session.auth.get_access(session).service_catalog.catalog
        urls = {endpoint["url"] for service in catalog for endpoint in service["endpoints"]}
        assert urls == {server.auth_url}


def test_a_mariadb_whose_port_was_taken_comes_up_on_another(tmp_path, taken):
    if not MARIADBD.exists():
        unavailable("MariaDB is not installed (make install)")
    with started_elsewhere(MariaDBServer.create(tmp_path, port=taken), taken) as server:
        assert server.ensure_database("probe", "probe", "secret")
        assert server.tables("probe") == []
