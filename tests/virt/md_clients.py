"""Clients of the metadata server, run inside a network namespace by the fairness tests
(tests/virt/test_mdserver_fairness.py), so each has a source address of its own:

    python -m tests.virt.md_clients hold HOST PORT COUNT
        opens COUNT connections and sends nothing on them; prints {"opened": n, "failed": m};
        then, for each line "count" on stdin, prints {"open": k} (those the server has not
        closed); closes them all and exits when stdin closes.
    python -m tests.virt.md_clients ask HOST PORT TIMES
        GET /latest/meta-data/instance-id TIMES times, one connection each; prints
        {"ms": [...], "status": [...]} (null for no answer within 30 s).
"""

from __future__ import annotations

import json
import select
import socket
import sys
import time

CONNECT_TIMEOUT = 5.0
ANSWER_TIMEOUT = 30.0
REQUEST = b"GET /latest/meta-data/instance-id HTTP/1.0\r\nHost: 169.254.169.254\r\n\r\n"


def report(value: dict[str, object]) -> None:
    print(json.dumps(value), flush=True)


def still_open(connections: list[socket.socket]) -> int:
    """How many of `connections` the server has not closed (EOF or reset)."""
    poller = select.poll()
    for connection in connections:
        poller.register(connection, select.POLLIN)
    closed = 0
    for fd, _events in poller.poll(0):
        connection = socket.socket(fileno=fd)  # a view on the same descriptor
        try:
            if connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                closed += 1
        except ConnectionError:
            closed += 1
        except BlockingIOError:
            pass
        finally:
            connection.detach()
    return len(connections) - closed


def hold(host: str, port: int, count: int) -> None:
    connections, failed = [], 0
    for _ in range(count):
        try:
            connections.append(socket.create_connection((host, port), timeout=CONNECT_TIMEOUT))
        except OSError:
            failed += 1
    report({"opened": len(connections), "failed": failed})
    for line in sys.stdin:
        if line.strip() == "count":
            report({"open": still_open(connections)})
    for connection in connections:
        connection.close()


def ask(host: str, port: int, times: int) -> None:
    took: list[float | None] = []
    statuses: list[int | None] = []
    for _ in range(times):
        started = time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=ANSWER_TIMEOUT) as connection:
                connection.sendall(REQUEST)
                answer = b""
                while chunk := connection.recv(4096):
                    answer += chunk
            took.append(round((time.monotonic() - started) * 1000, 1))
            statuses.append(int(answer.split(b" ", 2)[1]) if answer else None)
        except OSError:
            took.append(None)
            statuses.append(None)
    report({"ms": took, "status": statuses})


def main(argv: list[str]) -> int:
    command, host, port, number = argv
    {"hold": hold, "ask": ask}[command](host, int(port), int(number))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
