"""Keystone credentials as our config sections give them (`placement.keystone`,
`glance.keystone`): a keystoneauth1 auth plugin, and a session around it."""

from __future__ import annotations

from typing import Any


def auth_plugin(keystone: dict[str, Any]) -> Any:
    """A password or application-credential plugin (v3) for the section `keystone`."""
    from keystoneauth1.identity import v3

    if keystone.get("application_credential_id"):
        return v3.ApplicationCredential(
            auth_url=keystone["auth_url"],
            application_credential_id=keystone["application_credential_id"],
            application_credential_secret=keystone.get("application_credential_secret", ""))
    return v3.Password(
        auth_url=keystone["auth_url"], username=keystone.get("username"),
        password=keystone.get("password"), project_name=keystone.get("project_name"),
        user_domain_name=keystone.get("user_domain_name", "Default"),
        project_domain_name=keystone.get("project_domain_name", "Default"))


def session(keystone: dict[str, Any], verify: str | bool, timeout: float) -> Any:
    """A keystoneauth1 session: it caches the token, renews it before expiry, and on a 401
    authenticates once more and repeats the request."""
    from keystoneauth1 import session as ks_session

    return ks_session.Session(auth=auth_plugin(keystone), verify=verify, timeout=timeout)
