"""A server's password (os-server-password): what its guest POSTed to its metadata server,
as its host published it (`/hosts/<rp>/password/<uuid>`, compute/passwords.py). Clearing it
deletes that key; the host, watching it, then forgets the password too and the guest may
POST again (Nova's system_metadata cleared)."""

from __future__ import annotations

from etcd_compute import messages
from etcd_compute.api.objects.servers import Server
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import KeyValueStore


class ServerPasswords:
    def __init__(self, store: KeyValueStore):
        self.store = store

    def show(self, server: Server) -> str:
        """The password its host published, "" when there is none (or no host yet, or a
        value that breaks its schema: never shown)."""
        if not server.host:
            return ""
        try:
            message, _ = self.store.read(messages.SERVER_PASSWORD,
                                         self.store.keys.password(server.host, server.uuid))
        except InvalidMessage:
            return ""
        return (message or {}).get("password") or ""

    def clear(self, server: Server) -> None:
        """The password gone: its key deleted (the host forgets it when it sees that)."""
        if server.host:
            self.store.delete(self.store.keys.password(server.host, server.uuid))
