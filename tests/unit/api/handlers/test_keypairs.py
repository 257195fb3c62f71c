"""Keypairs: a user's own (admins name a user from 2.10); generated or imported; Nova's
status codes per microversion; names unique per user; the key_pairs quota."""

from __future__ import annotations

from tests.unit.api.harness import Harness
from tests.unit.api.objects.test_keypairs import SSH_KEY


def test_generate_import_list_show_delete():
    harness = Harness.new()
    made = harness.call("POST", "/v2.1/os-keypairs", {"keypair": {"name": "gen"}})
    assert made.status_int == 200 and made.json["keypair"]["private_key"].startswith(
        "-----BEGIN RSA PRIVATE KEY-----")
    imported = harness.call("POST", "/v2.1/os-keypairs",
                            {"keypair": {"name": "mine", "public_key": SSH_KEY}},
                            version="2.2")
    assert imported.status_int == 201
    assert "private_key" not in imported.json["keypair"]
    assert imported.json["keypair"]["type"] == "ssh"
    listed = harness.call("GET", "/v2.1/os-keypairs", version="2.35").json["keypairs"]
    assert [k["keypair"]["name"] for k in listed] == ["gen", "mine"]
    shown = harness.call("GET", "/v2.1/os-keypairs/mine").json["keypair"]
    assert shown["user_id"] == "u1" and shown["deleted"] is False
    assert harness.call("GET", "/v2.1/os-keypairs/mine", user="u2").status_int == 404
    assert harness.call("POST", "/v2.1/os-keypairs", {"keypair": {"name": "mine"}}
                        ).status_int == 409
    assert harness.call("DELETE", "/v2.1/os-keypairs/mine").status_int == 202
    assert harness.call("DELETE", "/v2.1/os-keypairs/gen", version="2.2").status_int == 204
    assert harness.call("DELETE", "/v2.1/os-keypairs/gen").status_int == 404


def test_another_users_keys_are_the_admins_from_2_10():
    harness = Harness.new()
    body = {"keypair": {"name": "k", "public_key": SSH_KEY, "user_id": "u2"}}
    assert harness.call("POST", "/v2.1/os-keypairs", body, version="2.10").status_int == 403
    assert harness.admin("POST", "/v2.1/os-keypairs", body, version="2.10").status_int == 201
    assert harness.call("GET", "/v2.1/os-keypairs/k", user="u2").status_int == 200
    assert harness.admin("GET", "/v2.1/os-keypairs?user_id=u2", version="2.10").json[
        "keypairs"][0]["keypair"]["name"] == "k"
    assert harness.call("GET", "/v2.1/os-keypairs?user_id=u2", version="2.10"
                        ).status_int == 403


def test_bad_keys_and_names_are_400_and_the_quota_403():
    harness = Harness.new()
    for body in ({"keypair": {"name": "k", "public_key": "ssh-rsa notakey"}},
                 {"keypair": {"name": "k/../x", "public_key": SSH_KEY}},
                 {"keypair": {"name": "k", "type": "x509"}}):
        refused = harness.call("POST", "/v2.1/os-keypairs", body, version="2.2")
        assert refused.status_int == 400, body
    harness.backend.quotas.update("p1", {"key_pairs": 1})
    harness.call("POST", "/v2.1/os-keypairs", {"keypair": {"name": "a", "public_key": SSH_KEY}})
    over = harness.call("POST", "/v2.1/os-keypairs",
                        {"keypair": {"name": "b", "public_key": SSH_KEY}})
    assert over.status_int == 403
    assert over.json["forbidden"]["message"] == "Quota exceeded, too many key pairs."
