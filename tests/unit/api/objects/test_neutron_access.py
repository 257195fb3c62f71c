"""Neutron asked with the caller's token, at the endpoint the service credential finds."""

from __future__ import annotations

import pytest
from oslo_context import context as oslo_context

from etcd_compute.api.context import Context
from etcd_compute.api.objects.neutron_access import CallerNeutron
from etcd_compute.errors import NeutronUnavailable

CONFIG = {"endpoint": "https://neutron.example:9696/", "ca_cert": None, "timeout": 7.0,
          "keystone": {"auth_url": "https://keystone.example/v3", "username": "etcd-compute",
                       "password": "secret", "project_name": "service",
                       "user_domain_name": "Default", "project_domain_name": "Default"}}


def caller(token: str | None) -> Context:
    oslo = oslo_context.RequestContext(user_id="u1", project_id="p1", roles=["member"],
                                       auth_token=token)
    return Context("u1", "p1", ("member",), "req-1", oslo)


def test_the_callers_token_goes_to_neutrons_endpoint() -> None:
    client = CallerNeutron(CONFIG)(caller("the-users-token"))
    assert client.endpoint == "https://neutron.example:9696"
    assert client.session.auth.token == "the-users-token"
    assert client.session.get_endpoint() == "https://neutron.example:9696"
    assert client.timeout == 7.0


def test_the_service_client_is_made_once() -> None:
    neutron = CallerNeutron(CONFIG)
    assert neutron.service is neutron.service


def test_a_request_without_a_token_is_never_sent_as_the_service() -> None:
    with pytest.raises(NeutronUnavailable, match="no token"):
        CallerNeutron(CONFIG)(caller(None))


def test_every_callers_client_shares_one_connection_pool_and_keeps_its_own_token() -> None:
    neutron = CallerNeutron(CONFIG)
    mine, theirs = neutron(caller("my-token")), neutron(caller("their-token"))
    assert mine.session.session is theirs.session.session  # the kept-alive connections
    assert (mine.session.auth.token, theirs.session.auth.token) == ("my-token", "their-token")
