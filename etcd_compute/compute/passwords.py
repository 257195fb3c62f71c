"""The guests' passwords: what a guest POSTed to its metadata server, published to etcd for
the compute API's os-server-password, and forgotten here when the API clears it.

The metadata server is a process of its own that knows no etcd (mdserver/password.py): it
keeps the guest's POST in the instance's directory (`password`, once, whole) and answers
the guest once `password.published` says the compute published it. A thread here looks for
kept passwords every SCAN_SECONDS (a stat of each instance directory's `password`) and has
the main loop publish each new one under its host's own prefix
(`/hosts/<rp>/password/<uuid>`, server_password; only while the instance's record there is
unchanged since read and not DELETED), then mark it published.

The API clears a password by deleting that key (its DELETE, Nova's 204): the deletion comes
back here (the host's watch of its password keys) and the files go, so the guest may POST
again, as Nova lets it. A deletion missed while the compute was away is found when the
watch starts or resyncs (`sync`): a password marked published whose key is gone was
cleared.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyetcd.events

from etcd_compute import messages
from etcd_compute.clock import SYSTEM, Clock
from etcd_compute.etcd import Compare, KeyValueStore, Txn, put_message
from etcd_compute.instances import records, states
from etcd_compute.keys import PASSWORD, UUID
from etcd_compute.virt.instance_files import InstanceFiles
from etcd_compute.watching import PrefixWatch, on_owner_thread

LOG = logging.getLogger("etcd_compute.compute")

# How often the instances' directories are looked at for a password a guest POSTed: the
# guest's POST waits for it (its owner reads the password right after).
SCAN_SECONDS = 0.2


class Passwords:
    def __init__(self, store: KeyValueStore, hosts: Iterable[str], instances_dir: str,
                 post: Callable[[Callable[..., None], tuple[Any, ...]], None]):
        self.store = store
        self.keys = store.keys
        self.hosts = list(hosts)
        self.instances_dir = Path(instances_dir)
        self.post = post
        # Handed to the main loop, not handled yet (the scan does not hand them again).
        self.pending: set[str] = set()
        # No host of ours holds the instance (another compute's, sharing the directory):
        # uuid -> the password left alone, until the guest's password changes.
        self.not_ours: dict[str, str] = {}
        self.watch: PrefixWatch | None = None
        self.stopping = threading.Event()
        self.clock: Clock = SYSTEM

    # --- the scan (its own thread) -------------------------------------------------------

    def kept(self) -> Iterable[tuple[str, InstanceFiles]]:
        """(uuid, files) of each instance directory with a kept password."""
        for path in self.instances_dir.glob("*/password"):
            uuid = path.parent.name
            if UUID.match(uuid):
                yield uuid, InstanceFiles.of(self.instances_dir, uuid)

    def scan(self) -> None:
        """Hand each new password (kept, not published) to the main loop."""
        for uuid, files in self.kept():
            if uuid in self.pending:
                continue
            text = files.read_password()
            if text is None or files.password_is_published(text) or \
                    self.not_ours.get(uuid) == text:
                continue
            self.pending.add(uuid)
            self.post(self.publish, (uuid,))

    @classmethod
    def of(cls, service: Any) -> Passwords:
        """For a compute service (its store, hosts, settings, post, stopping and clock)."""
        made = cls(service.store, service.hosts, service.settings["instances_dir"],
                   service.post)
        made.stopping, made.clock = service.stopping, service.clock
        return made

    def start(self) -> None:
        """With one host: the watch of its password keys, and the scan's thread (both end
        when the compute stops). A process that simulates many hosts runs the fake driver:
        no metadata server, no passwords."""
        if len(self.hosts) != 1:
            return
        self.watch = PrefixWatch(
            self.store, self.keys.passwords(self.hosts[0]),
            on_event=lambda event: self.post(self.on_event, (event,)),
            resync=on_owner_thread(self.post, self.sync, self.stopping.is_set),
            name="passwords-watch", log=LOG)
        threading.Thread(target=self.watch.run, name="passwords-watch", daemon=True).start()
        threading.Thread(target=self.run, name="passwords", daemon=True).start()

    def on_event(self, event: Any) -> None:
        """A password key of ours deleted (the API's clear): `cleared` (main loop)."""
        key = self.keys.parse_host_key(event.key.decode())
        if isinstance(event, pyetcd.events.DeleteEvent) and key is not None and \
                key.kind == PASSWORD and key.host in self.hosts:
            self.cleared(key.uuid)

    def run(self) -> None:
        """Scan until the compute stops, then end the watch too."""
        while not self.clock.wait(self.stopping, SCAN_SECONDS):
            try:
                self.scan()
            except OSError as exc:
                LOG.warning("passwords: cannot look at %s: %s", self.instances_dir, exc)
        if self.watch is not None:
            self.watch.cancel()

    # --- the main loop ------------------------------------------------------------------

    def publish(self, uuid: str) -> None:
        """Publish the instance's kept password under its host's prefix, then mark it."""
        try:
            files = InstanceFiles.of(self.instances_dir, uuid)
            text = files.read_password()
            if text is None or files.password_is_published(text):
                return
            for rp in self.hosts:
                read = records.read_record(self.store, rp, uuid)
                if read.record is None or read.record.get("state") == states.DELETED:
                    continue
                message = {"uuid": uuid, "password": text, "updated_at": time.time()}
                if self.store.commit(Txn(
                        [Compare(self.keys.record(rp, uuid), "mod", "==", read.revision)],
                        [put_message(messages.SERVER_PASSWORD, self.keys.password(rp, uuid),
                                     message)])) is None:
                    return  # the record changed meanwhile: the next scan tries again
                files.mark_password_published(text)
                self.not_ours.pop(uuid, None)
                LOG.info("instance %s: published the password its guest posted", uuid)
                return
            self.not_ours[uuid] = text
        finally:
            self.pending.discard(uuid)

    def cleared(self, uuid: str) -> None:
        """The API cleared the password (its key deleted): forget it here too, so the guest
        may POST again."""
        files = InstanceFiles.of(self.instances_dir, uuid)
        if files.password.exists():
            files.clear_password()
            LOG.info("instance %s: its password was cleared; the guest may post again", uuid)

    def sync(self) -> int:
        """At the start and after a lost watch: passwords cleared while we did not watch are
        forgotten (marked published, no key now, the instance ours). The revision read."""
        published: set[str] = set()
        revision = 0
        for rp in self.hosts:
            entries, revision = self.store.get_prefix(self.keys.passwords(rp), keys_only=True)
            published |= {entry.key.rsplit("/", 1)[-1] for entry in entries}
        for uuid, files in list(self.kept()):
            text = files.read_password()
            if text is None or uuid in published or not files.password_is_published(text):
                continue
            if any(records.read_record(self.store, rp, uuid).record for rp in self.hosts):
                self.cleared(uuid)
        return revision
