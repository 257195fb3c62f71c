"""A guest's password, as Nova's metadata API takes it (its `password.py`): the guest POSTs
it once to /openstack/<version>/password (cloudbase-init posts the administrator password
encrypted with the instance's key pair); the compute API's os-server-password shows it to
the server's owner and clears it, after which the guest may POST again.

Guests are untrusted: a body of more than MAX_SIZE bytes is 400 and nothing is kept (Nova's
limit; the server's max_request_body_bytes refuses more still with 413 before we read), so
is one that is not UTF-8 text; a second POST while one is kept is 409 (Nova's Conflict); an
empty one is no password, as Nova keeps it: nothing kept (Neutron's metadata proxy reads a
request in one `recv`, so a client that sends its body apart has it arrive empty). The
password is kept in the asking instance's own directory only (`InstanceFiles.keep_password`:
whole or not at all, one of two POSTs at once), the instance being the one the request was
resolved to (its lease, or the agent's signature): a guest cannot name another.

The compute daemon publishes a kept password to etcd for the API (compute/passwords.py) and
marks it published; the POST is answered once it is (at most PUBLISH_WAIT_SECONDS, then
200 anyway: the password is kept and the compute publishes it when it can), so the owner
who reads it right after the guest's POST finds it, as Nova's owner does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from etcd_compute.virt.instance_files import InstanceFiles

# Nova's metadata password.py MAX_SIZE: what a guest may POST.
MAX_SIZE = 256
PUBLISH_WAIT_SECONDS = 5.0
PUBLISH_POLL_SECONDS = 0.05


class PasswordRefused(Exception):
    """A POST not taken: `status` the HTTP status line, the message says why."""

    def __init__(self, status: str, why: str):
        super().__init__(why)
        self.status = status


def accept(files: InstanceFiles, body: bytes, wait: float | None = None,
           sleep: Callable[[float], None] = time.sleep,
           now: Callable[[], float] = time.monotonic) -> bool:
    """Keep `body` as the instance's password (PasswordRefused: 400 too long or not text,
    409 one is kept already); True once the compute published it, False when it did not
    within `wait` seconds (default PUBLISH_WAIT_SECONDS; kept all the same)."""
    if len(body) > MAX_SIZE:
        raise PasswordRefused("400 Bad Request",
                              f"the password is more than {MAX_SIZE} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise PasswordRefused("400 Bad Request", "the password is not UTF-8 text") from None
    if not text:  # Nova keeps "" as no password: nothing to keep, nothing to publish
        if files.read_password():
            raise PasswordRefused("409 Conflict", "a password is set already")
        return True
    if not files.keep_password(text):
        raise PasswordRefused("409 Conflict", "a password is set already")
    deadline = now() + (PUBLISH_WAIT_SECONDS if wait is None else wait)
    while not files.password_is_published(text):
        if now() >= deadline:
            return False
        sleep(PUBLISH_POLL_SECONDS)
    return True


def current(files: InstanceFiles) -> str:
    """What a GET of the password answers the guest: its kept password, "" without one."""
    return files.read_password() or ""
