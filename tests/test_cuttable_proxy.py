"""The tests' cuttable TCP proxy (tools/local_services/proxy.py): a cut breaks every path at
once, but a stream that ends by itself arrives whole (a response the peer has not read yet
when its server closes must not be thrown away by the proxy's reset)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

from tools.local_services.proxy import CuttableProxy

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB: still in the buffers, unread, as the server closes


def _server() -> tuple[socket.socket, threading.Thread]:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, contextlib.suppress(ConnectionResetError):  # the cut's
            connection.recv(16)
            connection.sendall(PAYLOAD)
        # closed: a FIN right behind the last byte, as a server closing does

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return listener, thread


def test_a_stream_its_server_ends_arrives_whole_through_the_proxy():
    listener, thread = _server()
    proxy = CuttableProxy("127.0.0.1", listener.getsockname()[1]).start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(b"GET")
            thread.join(10)
            time.sleep(0.2)  # the server has closed; most of the payload still in buffers
            received = bytearray()
            while chunk := client.recv(65536):
                received += chunk
        assert len(received) == len(PAYLOAD) and bytes(received) == PAYLOAD
    finally:
        proxy.stop()
        listener.close()


def _refused(port: int) -> bool:
    """A connection reset as it opens (the reset may come before connect returns) or at
    once after."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as late:
            return late.recv(16) == b""
    except ConnectionResetError:
        return True


def test_a_cut_resets_an_open_connection_and_refuses_new_ones():
    listener, _thread = _server()
    proxy = CuttableProxy("127.0.0.1", listener.getsockname()[1]).start()
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            time.sleep(0.2)  # connected through
            proxy.cut()
            try:
                broken = client.recv(16) == b""
            except ConnectionResetError:
                broken = True
            assert broken
        assert _refused(proxy.port)
    finally:
        proxy.stop()
        listener.close()
