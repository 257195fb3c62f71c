"""A TCP forwarder that a test can cut: a host's own path to etcd, to partition it.

    proxy = CuttableProxy("127.0.0.1", etcd_port).start()
    config["etcd"]["endpoints"] = [proxy.endpoint]
    proxy.cut()       # every connection reset, new ones refused: the host is cut off
    proxy.restore()   # back
    proxy.request_delay = 1.0   # every chunk to the target held 1 s: what a client sends
                                # arrives late (or never, if cut meanwhile)

It forwards bytes (TLS passes through untouched). Threads only; everything it
opened is closed by `stop()`. As a program it forwards until SIGTERM, e.g. from
inside a network namespace to a service in the root namespace, so a client
there can keep its usual endpoint (and the server certificate that names it):

    ip netns exec NS python -m tools.local_services.proxy 127.0.0.1:2379 10.77.3.1:2379

Or, with `listen_netns`, it listens inside that namespace itself (its listening socket made
there) and connects here: a client in the namespace reaches a service on this machine's
loopback with nothing listening on any other address.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import sys
import threading
import time

from tools.local_services.process import free_port


class CuttableProxy:
    def __init__(self, target_host: str, target_port: int, listen_port: int | None = None,
                 listen_host: str = "127.0.0.1", listen_netns: str | None = None):
        self.target = (target_host, target_port)
        self.host = listen_host
        self.netns = listen_netns
        self.port = listen_port or free_port()
        self._listener: socket.socket | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._open = threading.Event()
        self._stopping = threading.Event()
        # Seconds each chunk from the client to the target is held before it is passed on.
        self.request_delay = 0.0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> CuttableProxy:
        if self.netns is not None:
            from tools.local_services.netns import listen_in

            listener = listen_in(self.netns, self.host, self.port)
        else:
            listener = socket.socket()
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
        listener.settimeout(0.2)
        self._listener = listener
        self._open.set()
        threading.Thread(target=self._accept, name=f"proxy:{self.port}", daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._open.is_set():
                _reset(client)  # cut: refused at once
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=2)
            except OSError:
                _reset(client)
                continue
            # The timeout was for connecting: an idle connection (a keep-alive HTTP session,
            # a quiet gRPC channel) must not be dropped after 2 s of silence.
            upstream.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self._connections.update((client, upstream))
            ended: list[int] = []  # the directions that reached their end of stream
            for source, sink, outbound in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(source, sink, outbound, ended),
                                 daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, outbound: bool,
              ended: list[int]) -> None:
        try:
            while chunk := source.recv(65536):
                if outbound and self.request_delay:
                    time.sleep(self.request_delay)
                    if not self._open.is_set():
                        return  # cut meanwhile: what was held is lost, as on a cut cable
                sink.sendall(chunk)
        except OSError:  # a peer reset, or a cut: the other side sees the path break
            for sock in (source, sink):
                self._close(sock)
            return
        # End of stream: pass it on as a FIN after the bytes sent (an RST would throw away
        # what the peer has not read yet: a response cut short, seen under load).
        with self._lock:
            if source not in self._connections or sink not in self._connections:
                return  # not an end of stream: a cut woke this pump (and reset both)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
        with self._lock:
            ended.append(1)
            done = len(ended) == 2
            if done:
                self._connections.difference_update((source, sink))
        if done:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.close()

    def _close(self, sock: socket.socket) -> None:
        with self._lock:
            self._connections.discard(sock)
        _reset(sock)

    def cut(self) -> None:
        """Reset every connection and refuse new ones (as a pulled cable would, at once)."""
        self._open.clear()
        with self._lock:
            connections = list(self._connections)
        for sock in connections:
            self._close(sock)

    def restore(self) -> None:
        self._open.set()

    def stop(self) -> None:
        self._stopping.set()
        self.cut()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()


def _reset(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        # SO_LINGER 0: an RST, not a FIN: the peer sees the path break.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        # Wakes a pump blocked in recv on it (close alone would wait for that recv to
        # return: an idle connection would outlive its cut); sends nothing to the peer.
        sock.shutdown(socket.SHUT_RD)
    with contextlib.suppress(OSError):
        sock.close()


def main(argv: list[str]) -> int:
    """`LISTEN_HOST:PORT TARGET_HOST:PORT`: forward until SIGTERM or SIGINT."""
    (listen_host, listen_port), (target_host, target_port) = (
        (host, int(port)) for host, port in (arg.rsplit(":", 1) for arg in argv))
    proxy = CuttableProxy(target_host, target_port, listen_port, listen_host).start()
    done = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: done.set())
    done.wait()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
