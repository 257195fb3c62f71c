"""The tests' etcd (tools/local_services/etcd.py) comes up on other ports when the one it
was given is taken meanwhile (free_port only says a port was free a moment ago; one
worker's etcd losing that race failed every test of its session once)."""

from __future__ import annotations

import socket

from tools.local_services.etcd import EtcdServer


def test_an_etcd_whose_port_was_taken_comes_up_on_another(tmp_path):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        server = EtcdServer.create(tmp_path, port=taken)
        try:
            server.start()
            assert server.port != taken and server.running()
        finally:
            server.stop()
