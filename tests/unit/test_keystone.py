"""keystone.py: the config section becomes the right keystoneauth1 plugin, in a session that
verifies with the configured CA."""

from __future__ import annotations

from keystoneauth1.identity import v3

from etcd_compute import keystone

AUTH_URL = "https://keystone.invalid:5000/v3"


def test_a_password_section_authenticates_as_that_user_on_that_project():
    plugin = keystone.auth_plugin({"auth_url": AUTH_URL, "username": "etcd-compute",
                                   "password": "secret", "project_name": "service"})
    assert isinstance(plugin, v3.Password)
    method = plugin.auth_methods[0]
    assert (method.username, method.password, method.user_domain_name) == \
        ("etcd-compute", "secret", "Default")
    assert (plugin.project_name, plugin.project_domain_name) == ("service", "Default")


def test_an_application_credential_wins_over_a_password():
    plugin = keystone.auth_plugin({"auth_url": AUTH_URL, "username": "ignored",
                                   "application_credential_id": "abc",
                                   "application_credential_secret": "s3"})
    assert isinstance(plugin, v3.ApplicationCredential)
    method = plugin.auth_methods[0]
    assert (method.application_credential_id, method.application_credential_secret) == \
        ("abc", "s3")


def test_the_session_verifies_with_the_ca_and_keeps_the_timeout(tmp_path):
    ca = tmp_path / "ca.crt"
    session = keystone.session({"auth_url": AUTH_URL, "username": "u", "password": "p",
                                "project_name": "p"}, str(ca), 7.5)
    assert (session.verify, session.timeout) == (str(ca), 7.5)
    assert isinstance(session.auth, v3.Password)
