"""The scheduler service's queue in etcd: what a request and an answer are, on both sides.

    /queue/open                      the leading `schedule.py serve` takes requests (its lease)
    /queue/requests/<request_uuid>   schedule_request: written by schedule.py
    /queue/answers/<request_uuid>    schedule_answer: written by the service (with a lease)

A client writes its request only if the queue is open (one transaction
compares /queue/open, so no request is left behind for a service that is
not there), then watches its answer key. The service answers a request in
the same etcd transaction that writes its instances and deletes the request,
compared against the request as read and against the service's own
leadership: a request is answered at most once, and only by the leader.

The instances of a request have uuids derived from the request's uuid, so a
claim in Placement made by a leader that died before its transaction is
recognised by the next leader (the consumer already exists) and freed, never
leaked, never doubled; and a client that gave up knows which instances to
take back if its request was answered all the same.

A request carries its client's deadline (wall clock). The service never
places a request past it: so a client that cannot reach etcd to withdraw its
request knows, once the deadline and the clock skew allowed between machines
(`CLOCK_SKEW_SECONDS`) have passed, that nothing will be placed for it.
"""

from __future__ import annotations

import time
import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from etcd_compute import messages
from etcd_compute.errors import (
    ConflictError,
    EtcdComputeError,
    NoValidHost,
    ServiceUnavailable,
    UsageError,
)
from etcd_compute.etcd import Compare, Delete, Entry, Op, absent, put_message
from etcd_compute.keys import UUID, Keys
from etcd_compute.scheduler.spec import Destination, RequestSpec, server_view

# Instance uuids of a request: uuid5(this, "<request uuid>/<index>").
INSTANCE_NAMESPACE = uuidlib.UUID("5c1f3a52-6d0e-4f0e-9a3b-2b7e1d9c4e60")

# How far apart the clocks of the machines running schedule.py and schedule.py serve may be
# (NTP keeps them within milliseconds; a machine without it may drift this far).
CLOCK_SKEW_SECONDS = 10.0


def instance_uuids(request_uuid: str, count: int) -> list[str]:
    """The uuids the request's instances get, whoever answers it."""
    return [str(uuidlib.uuid5(INSTANCE_NAMESPACE, f"{request_uuid}/{index}"))
            for index in range(count)]


def request_message(request_spec: RequestSpec, client: str,
                    deadline: float | None = None) -> dict[str, Any]:
    """The schedule_request for `request_spec`, as the CLI parsed it; `deadline`: when the
    client gives up (never placed after it)."""
    message = {
        "query": request_spec.request.to_query(),
        "count": request_spec.count,
        "name": request_spec.name,
        "image_url": request_spec.image_url,
        "glance_image": request_spec.glance_image,
        "user_data": request_spec.user_data,
        "ssh_key": request_spec.ssh_key,
        **({} if request_spec.network else {"network": False}),
        **({} if request_spec.networks is None else {"networks": request_spec.networks}),
        **({} if request_spec.security_groups is None
           else {"security_groups": request_spec.security_groups}),
        "group": request_spec.group_message(),
        # --zone is in the query already (member_of).
        "zone": None,
        "on_host_failure": request_spec.on_host_failure,
        "requested_at": time.time(),
        "client": client[:255] or "schedule.py",
        # Who asked, for the instance's events (the service writes the specs).
        "requested_by": request_spec.requester(),
        # The compute API's: whose instances, their uuids, its view of them.
        **{name: value for name, value in (
            ("project_id", request_spec.project_id), ("user_id", request_spec.user_id),
            ("uuids", request_spec.uuids), ("server", request_spec.server))
           if value is not None},
    }
    if deadline is not None:
        message["deadline"] = deadline
    return message


def expired(message: dict[str, Any] | None, now: float | None = None) -> bool:
    """The request's client gave up (its deadline passed, by this machine's clock)."""
    deadline = (message or {}).get("deadline")
    return deadline is not None and (time.time() if now is None else now) > deadline


def expired_error(message: dict[str, Any]) -> ServiceUnavailable:
    return ServiceUnavailable(f"the request expired at its deadline "
                              f"({time.strftime('%H:%M:%S', time.gmtime(message['deadline']))}"
                              " UTC) before it was placed: nothing was placed")


def request_spec_of(message: dict[str, Any], settings: dict[str, Any]) -> RequestSpec:
    """The request checked again, on the service's side: UsageError naming the fault."""
    group = message.get("group")
    spec = _request_spec(message, settings, group)
    if spec.server is not None:  # what the service will write of it, checked before a claim
        uuid = (spec.uuids or instance_uuids(str(uuidlib.uuid4()), spec.count))[0]
        sample = Destination(uuid, spec.instance_name(0, uuid), uuid, "-", {})
        try:
            messages.check(messages.SERVER,
                           server_view(spec.server, sample, 0, spec.count, time.time()))
        except messages.InvalidMessage as exc:
            raise UsageError(f"invalid request: {exc}") from None
    return spec


def _request_spec(message: dict[str, Any], settings: dict[str, Any],
                  group: dict[str, Any] | None) -> RequestSpec:
    return RequestSpec.build(
        message["query"], count=message["count"], name=message.get("name"),
        image_url=message.get("image_url"), user_data=message.get("user_data"),
        ssh_key=message.get("ssh_key"),
        group=(group["name"], group["policy"]) if group else None, zone=message.get("zone"),
        group_max=(group or {}).get("max_per_host"),
        required_resources=settings["required_resources"],
        on_host_failure=message.get("on_host_failure"), project_id=message.get("project_id"),
        user_id=message.get("user_id"), uuids=message.get("uuids"),
        server=message.get("server"), glance_image=message.get("glance_image"),
        network=message.get("network", True), networks=message.get("networks"),
        security_groups=message.get("security_groups"))


@dataclass
class Pending:
    """One request as the service read it."""

    uuid: str
    entry: Entry
    message: dict[str, Any] | None = None
    spec: RequestSpec | None = None
    # Why it cannot be scheduled (its answer), if it cannot.
    fault: EtcdComputeError | None = None

    @property
    def instances(self) -> list[str]:
        """The uuids the request named (the compute API's), else derived from its own."""
        assert self.spec is not None
        return self.spec.uuids or instance_uuids(self.uuid, self.spec.count)


def read_pending(keys: Keys, entries: list[Entry], settings: dict[str, Any]) -> list[Pending]:
    """Requests in arrival order, each decoded and checked; a hostile one carries its fault.
    Keys that are no request uuid come back with uuid "" (to be removed, not answered)."""
    pending = []
    for entry in sorted(entries, key=lambda e: e.create_revision):
        name = entry.key[len(keys.queue_requests()):]
        if not UUID.match(name):
            pending.append(Pending("", entry))
            continue
        request = Pending(name, entry)
        try:
            request.message = messages.decode(messages.SCHEDULE_REQUEST, entry.value)
            request.spec = request_spec_of(request.message, settings)
        except messages.InvalidMessage as exc:
            request.fault = UsageError(f"invalid request: {exc}")
        except UsageError as exc:
            request.fault = exc
        pending.append(request)
    return pending


# --- answers ------------------------------------------------------------------------------

ERROR_KINDS: dict[str, type[EtcdComputeError]] = {
    "no_valid_host": NoValidHost, "usage": UsageError, "conflict": ConflictError,
    "unavailable": ServiceUnavailable, "failed": EtcdComputeError,
}


def answer_of(result: list[Destination] | EtcdComputeError, batch: int,
              conflicts: int = 0) -> dict[str, Any]:
    """The schedule_answer for destinations or an error."""
    answer: dict[str, Any] = {"answered_at": time.time(), "batch": max(1, batch),
                              "conflicts": conflicts}
    if isinstance(result, EtcdComputeError):
        kind = next((k for k, cls in ERROR_KINDS.items() if type(result) is cls), None)
        if kind is None:
            kind = next(k for k, cls in ERROR_KINDS.items() if isinstance(result, cls))
        error: dict[str, Any] = {"kind": kind, "message": _line(str(result))}
        if isinstance(result, NoValidHost):
            error["reasons"] = [_line(reason) for reason in result.reasons[:100]]
        answer["error"] = error
    else:
        answer["destinations"] = [d.as_dict() for d in result]
    return answer


def _line(text: str) -> str:
    """One printable line of at most 2000 characters (the schema's limits)."""
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    return text if len(text) <= 2000 else text[:1997] + "..."


def result_of(answer: dict[str, Any]) -> list[Destination]:
    """The destinations of an answer, or its error raised as the direct path raises it."""
    error = answer.get("error")
    if error is None:
        return [Destination(**d) for d in answer["destinations"]]
    kind = ERROR_KINDS[error["kind"]]
    if kind is NoValidHost:
        raise NoValidHost(error.get("reasons", []))
    if kind is ConflictError:
        raise ConflictError(error["message"], 409)
    raise kind(error["message"])


def answer_ops(keys: Keys, request: Pending, answer: dict[str, Any],
               lease: int | None) -> tuple[list[Compare], list[Op]]:
    """Answer `request`: only if it is still there as read and not answered yet."""
    entry = request.entry
    return ([Compare(entry.key, "mod", "==", entry.mod_revision),
             absent(keys.queue_answer(request.uuid))],
            [put_message(messages.SCHEDULE_ANSWER, keys.queue_answer(request.uuid), answer,
                         lease),
             Delete(entry.key)])
