"""Remote consoles: a console's token, and the few words the console proxy and a host's
relay say to each other. One home for both: the compute API and `schedule.py console --url`
issue tokens here, the console proxy consumes them here, and the proxy and the compute's
relay (`compute/console_relay.py`) speak the relay's protocol from here.

A token is 32 random bytes (URL-safe base64, 43 characters), given to the caller once.
etcd keeps only its SHA-256 as the key (`/console-tokens/<hex>`), so a reader of etcd or
of its backups learns no token; the value (`console_token`) names the server and nothing
else, so a token cannot carry a host or a port: the proxy looks up where the server is
now. The key is bound to a lease of `console.token_ttl_seconds` (Nova's
`[consoleauth] token_ttl`, 600 s), and the value's `expires_at` is checked too (a lease
may outlive its TTL by a moment). A token is used once: `consume` deletes its key in a
transaction that holds only if nobody else deleted or changed it first.

The relay's protocol, over mutual TLS (the proxy's certificate `OU=console-proxy`, the
relay's a server certificate naming the host's address, both from the cluster CA): the
proxy sends one line `CONSOLE <instance uuid>\\n`; the relay answers `OK\\n` and from then
on carries the guest's VNC (RFB) both ways, or `NO <reason>\\n` and closes.
"""

from __future__ import annotations

import base64
import hashlib
import re
import secrets
import select
import socket
import ssl
import time
from dataclasses import dataclass
from urllib import parse

from etcd_compute import messages
from etcd_compute.errors import EtcdComputeError, InvalidMessage
from etcd_compute.etcd import Delete, KeyValueStore, Txn, put_message, unchanged
from etcd_compute.keys import UUID

TOKEN_BYTES = 32
# What `issue` hands out: URL-safe base64 of TOKEN_BYTES, no padding.
TOKEN = re.compile(r"\A[A-Za-z0-9_-]{43}\Z")
# The console types we serve (Nova's names): noVNC in a browser, through the proxy.
NOVNC = "novnc"

# The relay's protocol.
REQUEST_MAX_BYTES = 64
PIPE_CHUNK = 65536
ANSWER_MAX_BYTES = 200
_REQUEST = re.compile(r"\ACONSOLE ([0-9a-f-]{36})\n\Z")


class TokenRefused(EtcdComputeError):
    """A console token that opens nothing: unknown, malformed, expired or used."""


@dataclass(frozen=True)
class Granted:
    """What a consumed token opens: one server's console."""

    instance_uuid: str
    console_type: str
    issued_by: str


def digest(token: str) -> str:
    """The key a token is kept under: its SHA-256, hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def issue(store: KeyValueStore, instance_uuid: str, ttl_seconds: int, issued_by: str,
          console_type: str = NOVNC, now: float | None = None) -> str:
    """A new single-use token for `instance_uuid`'s console, valid `ttl_seconds`."""
    if not UUID.match(instance_uuid):
        raise ValueError(f"instance uuid {instance_uuid!r}: not a uuid")
    issued_at = time.time() if now is None else now
    token = base64.urlsafe_b64encode(secrets.token_bytes(TOKEN_BYTES)).decode().rstrip("=")
    message = {"instance_uuid": instance_uuid, "console_type": console_type,
               "issued_at": issued_at, "expires_at": issued_at + ttl_seconds,
               "issued_by": issued_by[:300]}
    lease = store.grant(int(ttl_seconds))
    key = store.keys.console_token(digest(token))
    store.commit(Txn([], [put_message(messages.CONSOLE_TOKEN, key, message, lease)]))
    return token


def consume(store: KeyValueStore, token: str, now: float | None = None) -> Granted:
    """What `token` opens, the token used up (TokenRefused: it opens nothing, ever again)."""
    if not isinstance(token, str) or not TOKEN.match(token):
        raise TokenRefused("console token malformed")
    key = store.keys.console_token(digest(token))
    entry = store.get(key)
    if entry is None:
        raise TokenRefused("console token invalid, expired or already used")
    # Used up first, whatever it says: a second use finds nothing.
    if store.commit(Txn([unchanged(key, entry.mod_revision)], [Delete(key)])) is None:
        raise TokenRefused("console token already used")
    try:
        found = messages.decode(messages.CONSOLE_TOKEN, entry.value)
    except InvalidMessage as exc:
        raise TokenRefused(f"console token unreadable: {exc}") from None
    if found["expires_at"] <= (time.time() if now is None else now):
        raise TokenRefused("console token expired")
    return Granted(found["instance_uuid"], found["console_type"], found["issued_by"])


def access_url(base_url: str, token: str) -> str:
    """The URL a caller opens: `base_url` (noVNC's page) with the token inside noVNC's
    `path` parameter (the websocket's path, `?token=...`), as Nova's access_url since noVNC
    1.1 dropped the top-level `token` parameter."""
    parts = parse.urlsplit(base_url)
    query = parse.parse_qs(parts.query)
    query["path"] = [f"{query.get('path', [''])[0]}?token={token}"]
    return parse.urlunsplit(parts._replace(query=parse.urlencode(query, doseq=True)))


# --- the relay's protocol ------------------------------------------------------------------


def request_line(instance_uuid: str) -> bytes:
    return f"CONSOLE {instance_uuid}\n".encode()


def parse_request(line: bytes) -> str:
    """The instance uuid a proxy's request names (ValueError: not a request)."""
    try:
        found = _REQUEST.match(line.decode("ascii"))
    except UnicodeDecodeError:
        found = None
    if found is None or not UUID.match(found.group(1)):
        raise ValueError("not a console request")
    return found.group(1)


def answer_ok() -> bytes:
    return b"OK\n"


def answer_no(reason: str) -> bytes:
    text = "".join(ch if ch.isprintable() else "?" for ch in reason)
    return f"NO {text}"[:ANSWER_MAX_BYTES - 1].encode("ascii", "replace") + b"\n"


def parse_answer(line: bytes) -> str | None:
    """None when the relay said OK; else its reason."""
    if line == b"OK\n":
        return None
    text = line.decode("ascii", "replace").rstrip("\n")
    return text[3:] if text.startswith("NO ") else f"unexpected answer {text[:80]!r}"


def pipe(one: socket.socket, other: socket.socket) -> None:
    """Carry bytes both ways until either end closes, in this one thread (a TLS socket is
    read and written by one thread only; what it has decrypted already is read first)."""
    ends = [one, other]
    while True:
        ready = [end for end in ends if isinstance(end, ssl.SSLSocket) and end.pending()]
        if not ready:
            ready, _, _ = select.select(ends, [], [])
        for end in ready:
            data = end.recv(PIPE_CHUNK)
            if not data:
                return
            (other if end is one else one).sendall(data)
