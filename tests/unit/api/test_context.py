"""The caller is what auth_token confirmed; a token not scoped to a project is refused."""

from __future__ import annotations

import pytest

from etcd_compute.api.context import Context, NotProjectScoped, new_request_id


def environ(**headers: str) -> dict[str, str]:
    return {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}


def test_a_confirmed_project_token_is_the_caller():
    context = Context.from_environ(environ(**{
        "X-Identity-Status": "Confirmed", "X-User-Id": "u1", "X-Project-Id": "p1",
        "X-Roles": "member,reader"}))
    assert context is not None
    assert (context.user_id, context.project_id, context.roles) == ("u1", "p1",
                                                                    ("member", "reader"))
    assert context.request_id.startswith("req-") and not context.is_admin
    assert context.with_admin(True).is_admin


def test_no_confirmation_is_no_caller_and_a_domain_token_is_refused():
    assert Context.from_environ(environ(**{"X-User-Id": "u1", "X-Project-Id": "p1"})) is None
    assert Context.from_environ(environ(**{"X-Identity-Status": "Invalid",
                                           "X-User-Id": "u1", "X-Project-Id": "p1"})) is None
    with pytest.raises(NotProjectScoped):
        Context.from_environ(environ(**{"X-Identity-Status": "Confirmed", "X-User-Id": "u1",
                                        "X-Domain-Id": "default"}))
    assert new_request_id() != new_request_id()


def test_the_request_id_is_the_one_the_app_gave_the_request():
    """oslo's request id middleware's key: the id the answer's headers carry."""
    context = Context.from_environ({**environ(**{
        "X-Identity-Status": "Confirmed", "X-User-Id": "u1", "X-Project-Id": "p1"}),
        "openstack.request_id": "req-0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"})
    assert context is not None
    assert context.request_id == "req-0b5d6c43-43f6-4c1e-9f8b-6c5a8a6f2a11"
