"""Who is asking: the caller keystonemiddleware's auth_token vouched for, and the request id.

auth_token puts the token's user, project and roles in headers (X-User-Id,
X-Project-Id, X-Roles, ...) after validating it with Keystone; oslo.context reads
them as every OpenStack service does. A request it did not confirm never gets
here (auth_token answers 401 itself).
"""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass
from typing import Any

from oslo_context import context as oslo_context


class NotProjectScoped(Exception):
    """A valid token, but not scoped to a project (a domain or the system)."""


@dataclass(frozen=True)
class Context:
    """The caller of one request."""

    user_id: str
    project_id: str
    roles: tuple[str, ...]
    request_id: str
    # What oslo.policy checks rules against (the token's scope, roles, ids).
    oslo: oslo_context.RequestContext
    # The `context_is_admin` rule holds for this caller (set by the app from the policy).
    is_admin: bool = False

    @classmethod
    def from_environ(cls, environ: dict[str, Any]) -> Context | None:
        """The caller auth_token confirmed; None when it did not (no or a bad token);
        NotProjectScoped for a token of a domain or the system (every call here is a
        project's, as in Nova)."""
        if environ.get("HTTP_X_IDENTITY_STATUS") != "Confirmed":
            return None
        # The app's id for the request (oslo's request id middleware's key): the answer's.
        oslo = oslo_context.RequestContext.from_environ(
            environ, request_id=environ.get("openstack.request_id") or new_request_id())
        if not oslo.user_id or not oslo.project_id:
            raise NotProjectScoped("this API takes project-scoped tokens only")
        return cls(user_id=oslo.user_id, project_id=oslo.project_id,
                   roles=tuple(oslo.roles or ()), request_id=oslo.request_id, oslo=oslo)

    def with_admin(self, is_admin: bool) -> Context:
        return Context(self.user_id, self.project_id, self.roles, self.request_id, self.oslo,
                       is_admin)


def new_request_id() -> str:
    """An id for one request, as Nova's (`req-<uuid>`), in the answer's headers and logs."""
    return f"req-{uuidlib.uuid4()}"
