"""Neutron as the caller sees it (the neutron backend): the compute API asks Neutron with the
caller's own token, as Nova's API does (`get_client(context)`), so Neutron's policy decides
which networks, ports and security groups a project may see and use. The service
credential (`network.neutron.keystone`) only finds Neutron's endpoint in the catalog
(unless `network.neutron.endpoint` names it); the compute hosts use it to make the ports.
"""

from __future__ import annotations

import threading
from typing import Any

from etcd_compute.api.context import Context
from etcd_compute.errors import NeutronUnavailable
from etcd_compute.neutron import NeutronClient


class TokenNeutronClient(NeutronClient):
    """A NeutronClient that sends a caller's token to `endpoint`."""

    def __init__(self, endpoint: str, token: str, verify: str | bool, timeout: float,
                 connections: Any = None):
        """`connections`: a requests.Session whose kept-alive connections to Neutron are
        reused (shared by every caller's client: one TLS handshake per connection, not
        per request)."""
        from keystoneauth1 import session as ks_session
        from keystoneauth1 import token_endpoint

        self.verify, self.timeout = verify, timeout
        self._endpoint = endpoint
        self.session = ks_session.Session(auth=token_endpoint.Token(endpoint, token),
                                          verify=verify, timeout=timeout,
                                          session=connections)


class CallerNeutron:
    """`neutron(context)`: the caller's NeutronClient."""

    def __init__(self, neutron_config: dict[str, Any]):
        self.neutron_config = neutron_config
        self._service: NeutronClient | None = None
        self._lock = threading.Lock()
        self._connections: Any = None

    @property
    def service(self) -> NeutronClient:
        with self._lock:
            if self._service is None:
                import requests

                self._service = NeutronClient(self.neutron_config)
                # Its connection pool serves every caller's requests: the token is per
                # request (a header), never per connection.
                self._connections = requests.Session()
                for scheme in ("https://", "http://"):
                    self._connections.mount(scheme, requests.adapters.HTTPAdapter(
                        pool_connections=4, pool_maxsize=16))
            return self._service

    def __call__(self, context: Context) -> NeutronClient:
        token = context.oslo.auth_token
        if not token:
            raise NeutronUnavailable("Neutron: the request carries no token to ask it with")
        service = self.service
        return TokenNeutronClient(service.endpoint, token, service.verify, service.timeout,
                                  self._connections)
