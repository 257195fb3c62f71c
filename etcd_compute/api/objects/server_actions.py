"""A server's actions through the operator's one path (`ops/lifecycle.py`), with the
API's view of each written in the request's own transaction.

What the API writes besides the host's request, in the same etcd transaction:

- `task` on the server's view: the action asked, until its host takes it up (the record
  then names the request), so a client sees Nova's task_state at once (`powering-off`,
  `rebooting_hard`, `resize_prep` ...) and a wait for the end never ends before it began;
- for a resize, `resize`: the old and new flavors and the consumer that holds the old
  size in Placement until it is confirmed or reverted (VERIFY_RESIZE), as Nova's
  migration consumer does;
- for a rebuild, what it changes of the server (name, metadata, image, key, user data).

A confirm frees the old size (`lifecycle.confirm_resize`) and the view keeps the new
flavor; a revert takes the old size back in Placement and asks the host to resize back.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from collections.abc import Callable
from typing import Any

from etcd_compute import messages
from etcd_compute.api.objects.flavors import Flavor
from etcd_compute.api.objects.images import Image, Images
from etcd_compute.api.objects.quotas import OverQuota, Quotas
from etcd_compute.api.objects.servers import Server
from etcd_compute.errors import InvalidMessage, NotFound, UsageError
from etcd_compute.etcd import Compare, KeyValueStore, Op, Txn, put_message
from etcd_compute.instances import records, states
from etcd_compute.ops import lifecycle, migrations, operations
from etcd_compute.placement import PlacementClient
from etcd_compute.scheduler.scheduler import Scheduler

# A change of the view: (the request written, the view as it is now) -> the fields changed.
ViewChange = Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]


class ServerActions:
    def __init__(self, store: KeyValueStore, placement: PlacementClient, quotas: Quotas,
                 required_resources: list[str], images: Images,
                 config: dict[str, Any] | None = None):
        self.store = store
        self.config = config  # the scheduler's, for where a live migration goes
        self.keys = store.keys
        self.placement = placement
        self.quotas = quotas
        self.required = required_resources
        self.images = images

    # --- the view in the request's transaction --------------------------------------------

    def _view(self, server: Server, change: ViewChange) -> lifecycle.Also:
        """The API's view changed by `change`, compared with the view as it is when the
        request is written (a view gone or unreadable fails the compare: asked again)."""
        key = self.keys.server(server.uuid)

        def also(request: dict[str, Any]) -> tuple[list[Compare], list[Op]]:
            entry = self.store.get(key)
            try:
                doc = messages.decode(messages.SERVER, entry.value) if entry else None
            except InvalidMessage:
                doc = None
            if entry is None or doc is None:
                return [Compare(key, "version", "==", -1)], []
            doc = {**doc, **change(request, doc), "updated_at": time.time()}
            return ([Compare(key, "mod", "==", entry.mod_revision)],
                    [put_message(messages.SERVER, key, doc)])

        return also

    @staticmethod
    def _task(action: str, **extra: Any) -> ViewChange:
        return lambda request, _doc: {"task": {
            "action": action, "request_id": request["id"], "at": request["at"], **extra}}

    # --- power ----------------------------------------------------------------------------

    def start(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.START,
                          also=self._view(server, self._task("start")), by=by)

    def stop(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.STOP,
                          also=self._view(server, self._task("stop")), by=by)

    def suspend(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.SUSPEND,
                          also=self._view(server, self._task("suspend")), by=by)

    def resume(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.RESUME,
                          also=self._view(server, self._task("resume")), by=by)

    def pause(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.PAUSE,
                          also=self._view(server, self._task("pause")), by=by)

    def unpause(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.UNPAUSE,
                          also=self._view(server, self._task("unpause")), by=by)

    def reboot(self, server: Server, hard: bool, by: str) -> None:
        """A hard reboot of a stopped server powers it on, as Nova's does (our start)."""
        if hard and server.state == states.SHUTOFF:
            lifecycle.request(self.store, self.placement, server.uuid, states.START,
                              also=self._view(server, self._task("reboot", hard=True)),
                              by=by)
            return
        lifecycle.request(self.store, self.placement, server.uuid, states.REBOOT, hard=hard,
                          also=self._view(server, self._task("reboot", hard=hard)), by=by)

    # --- security groups ------------------------------------------------------------------

    def networked(self, server: Server) -> bool:
        """Whether the server has a network interface (its spec: not `networks: none`); one
        not placed on a host has none."""
        if not server.host:
            return False
        _entry, spec = records.read_spec(self.store, server.host, server.uuid)
        return spec is not None and spec.get("network", True) is not False

    def set_security_groups(self, server: Server, groups: list[str], by: str) -> None:
        """The instance's security groups become `groups`: its host swaps the filter; the
        view shows them at once (its task, until the host takes the request up)."""
        lifecycle.request(self.store, self.placement, server.uuid, states.SECURITY_GROUPS,
                          asked=lifecycle.Asked(security_groups=list(groups)),
                          also=self._view(server, self._task(
                              "security-groups", security_groups=list(groups))), by=by)

    # --- interfaces (the neutron backend's os-interface) -----------------------------------

    def plug(self, server: Server, action: str, nic: dict[str, str],
             by: str) -> lifecycle.Requested:
        """A port plugged (`action` attach-interface: `nic` a network, with a fixed IP or
        not, or a port) or unplugged (detach-interface: {port}) by the server's host."""
        return lifecycle.request(self.store, self.placement, server.uuid, action,
                                 asked=lifecycle.Asked(nic=dict(nic)),
                                 also=self._view(server, self._task(action)), by=by)

    # --- rebuild --------------------------------------------------------------------------

    def rebuild(self, server: Server, image: Image, changes: dict[str, Any],
                guest: dict[str, Any], by: str) -> None:
        """A fresh disk from `image`; `changes` to the view (name, image, metadata...)
        and `guest`'s new user data or key (user_data, ssh_key) with it."""
        fields = dict(changes)
        image_for = (lambda _held: image.spec_image()) if image.glance else None
        lifecycle.request(
            self.store, self.placement, server.uuid, states.REBUILD,
            asked=lifecycle.Asked(image_url=image.url, rebuild=guest, image_for=image_for),
            also=self._view(server, lambda r, doc: {**fields, **self._task("rebuild")(r, doc)}),
            by=by)

    # --- resize ---------------------------------------------------------------------------

    def resize(self, server: Server, flavor: Flavor, by: str) -> None:
        """To `flavor`'s size on the server's host, the old size held until confirmed.
        UsageError (400) for a size it cannot take, OverQuota (403) beyond the project's
        cores or ram."""
        old = server.doc["flavor"]
        if flavor.id == old["id"]:
            raise UsageError("When resizing, instances must change flavor!")
        if flavor.disk == 0:
            raise UsageError("Resize to zero disk flavor is not allowed.")
        groups = flavor.resources()
        if set(groups) != {""}:
            raise UsageError(f"Flavor {flavor.id} asks for granular resource groups: a "
                             "resize here stays on the server's host and takes one size")
        resources = lifecycle.resize_request(
            "resources=" + ",".join(f"{rc}:{n}" for rc, n in sorted(groups[""].items())),
            self.required)
        if resources.get("DISK_GB", 0) < (server.record or {}).get(
                "resources", {}).get("DISK_GB", 0):
            raise UsageError("Unable to resize disk down.")
        self._check_traits(server, flavor)
        self._check_quota(server, old, flavor)
        hold = str(uuidlib.uuid4())
        new = flavor.snapshot()

        def change(request: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
            return {"resize": {"hold": hold, "request_id": request["id"], "old_flavor": old,
                               "new_flavor": new, "resources": resources},
                    **self._task("resize")(request, doc)}

        lifecycle.request(self.store, self.placement, server.uuid, states.RESIZE,
                          asked=lifecycle.Asked(resources=resources, hold=hold),
                          also=self._view(server, change), by=by)

    def _check_traits(self, server: Server, flavor: Flavor) -> None:
        """The server stays on its host: the new flavor's required traits must be there and
        its forbidden ones not (as the scheduler would have checked)."""
        wanted = {key.split(":", 1)[1]: value for key, value in flavor.extra_specs.items()
                  if key.startswith("trait:")}
        if not wanted or not server.host:
            return
        present = self.placement.get_traits(server.host)
        wrong = sorted(t for t, v in wanted.items()
                       if (v == "required") != (t in present))
        if wrong:
            raise UsageError(f"Flavor {flavor.id} asks for traits its host does not match "
                             f"({', '.join(wrong)}): a resize here stays on its host")

    def _check_quota(self, server: Server, old: dict[str, Any], flavor: Flavor) -> None:
        """Nova's upsize check: the growth in cores and ram within the project's limits."""
        deltas = {"cores": flavor.vcpus - int(old.get("vcpus", 0)),
                  "ram": flavor.ram - int(old.get("ram", 0))}
        deltas = {q: d for q, d in deltas.items() if d > 0}
        if not deltas:
            return
        limits = self.quotas.limits(server.project_id)
        if all(limits[q] < 0 for q in deltas):
            return
        count = self.quotas.count(server.project_id)
        overs = [q for q in ("cores", "ram") if q in deltas and limits[q] >= 0 and
                 count.total(q) + deltas[q] > limits[q]]
        if overs:
            raise OverQuota(
                f"Quota exceeded for {', '.join(overs)}: Requested "
                f"{', '.join(str(deltas[q]) for q in overs)}, but already used "
                f"{', '.join(str(count.total(q)) for q in overs)} of "
                f"{', '.join(str(limits[q]) for q in overs)} {', '.join(overs)}")

    def confirm_resize(self, server: Server, by: str) -> None:
        """The new size kept, the old one freed; the view's flavor is the new one."""
        def change(hold: dict[str, Any], doc: dict[str, Any]) -> dict[str, Any]:
            resize = doc.get("resize") or {}
            if resize.get("hold") != hold["consumer"]:
                return {}
            return {"flavor": resize["new_flavor"], "resize": None}

        lifecycle.confirm_resize(self.store, self.placement, server.uuid,
                                 also=self._view(server, change), by=by)

    def revert_resize(self, server: Server, by: str) -> None:
        lifecycle.request(self.store, self.placement, server.uuid, states.RESIZE,
                          asked=lifecycle.Asked(revert=True),
                          also=self._view(server, self._task("revert-resize")), by=by)

    # --- live migration -------------------------------------------------------------------

    def move(self, server: Server, host: str | None, by: str,
             live: bool = True) -> None:
        """Move the server to another host (`schedule.py migrate [--live | --verify]`'s
        path, ops/migrations.py), running (live) or stopped and started again (cold, then
        awaiting `confirm_move` or `revert_move`: Nova's VERIFY_RESIZE): where
        the scheduler would put it now, or the host named (a provider name or uuid)
        checked the same way; both hosts held in Placement while it moves. NoValidHost,
        NotFound (no such host), ActionRefused."""
        if self.config is None:
            raise UsageError("a move needs the scheduler's config here")
        scheduler = Scheduler(self.config, store=self.store,  # type: ignore[arg-type]
                              placement=self.placement)
        asked = migrations.migrate(self.store, self.placement, scheduler.place, server.uuid,
                                   live=live, host=host, by=by, verify=not live)
        # Shown as Nova's task_state (migrating, resize_prep) from the 202 until the
        # source takes the move up (servers.py drops it if the move is gone before). The
        # move is asked already: a view changed meanwhile only misses the task.
        compares, ops = self._view(server, self._task("live-migrate" if live else "migrate")
                                   )(asked.request)
        self.store.commit(Txn(compares, ops))

    def awaits_move_confirm(self, server: Server) -> bool:
        """Whether the server's VERIFY_RESIZE is a cold move's (else a resize's)."""
        return server.state == states.MIGRATED

    def confirm_move(self, server: Server, by: str) -> None:
        """A cold move awaiting its confirm handed over (`schedule.py migrate-confirm`)."""
        migrations.confirm(self.store, self.placement, server.uuid, by=by)

    def revert_move(self, server: Server, by: str) -> None:
        """A cold move awaiting its confirm reverted (`schedule.py migrate-revert`): back
        on its source, started again if it ran (the view's task until then)."""
        lifecycle.revert_move(self.store, self.placement, server.uuid, by=by,
                              also=self._view(server, self._task("revert-resize")))

    # --- createImage ----------------------------------------------------------------------

    def create_image(self, server: Server, name: str, metadata: dict[str, str],
                     by: str, rotation: dict[str, Any] | None = None) -> str:
        """A snapshot of the server's disk into a new Glance image of its project (live if
        it runs, as `schedule.py snapshot`); the image's id. The image is deleted again
        when the request is refused (nothing is left in Glance). A backup (createBackup)
        is one with `image_type` backup, its `backup_type`, and a `rotation` ({backup_type,
        keep}) the host applies once it is uploaded, as Nova's compute manager does."""
        if rotation is not None:
            metadata = {**metadata, "image_type": "backup",
                        "backup_type": rotation["backup_type"]}
        snapshot_for, forget = self.images.snapshot(name, metadata)

        def image_for(spec: dict[str, Any]) -> dict[str, Any]:
            made = snapshot_for(spec)
            return {**made, "rotation": rotation} if rotation is not None else made
        try:
            asked = lifecycle.request(self.store, self.placement, server.uuid, states.SNAPSHOT,
                                      asked=lifecycle.Asked(image_for=image_for),
                                      also=self._view(server, self._task("snapshot")), by=by)
        except BaseException:
            forget()
            raise
        return str(asked.request["snapshot"]["image_id"])

    # --- console --------------------------------------------------------------------------

    def diagnostics(self, server: Server) -> dict[str, Any] | None:
        """The guest's diagnostics its host published with its console (as of then), or
        None: none published (yet), or its driver has none."""
        if not server.host:
            return None
        try:
            message, _ = self.store.read(messages.CONSOLE,
                                         self.keys.console(server.host, server.uuid))
        except InvalidMessage:
            return None
        return (message or {}).get("diagnostics")

    def console_output(self, server: Server) -> str | None:
        """The tail of the guest's serial console its host published; None when it has
        published none (yet)."""
        try:
            return operations.console(self.store, server.uuid)
        except NotFound:
            return None

