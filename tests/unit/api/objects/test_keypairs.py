"""Keypairs: parsed before they are kept, Nova's fingerprints, generated RSA keys whose
private half is never stored, names unique per user, the quota counted atomically."""

from __future__ import annotations

import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from etcd_compute.api.objects import keypairs
from etcd_compute.api.objects.keypairs import (
    InvalidKeypair,
    KeypairExists,
    Keypairs,
    TooManyKeypairs,
)
from tests.unit.fakes import FakeStore

SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAOebfgqLRfNk0A44nMrLBjoefhT3Me4wQUgpyD8zEsH test"


def test_an_imported_ssh_key_has_novas_md5_fingerprint():
    keypair = keypairs.imported("k", "u1", "ssh", SSH_KEY + "\n")
    assert keypair.public_key == SSH_KEY
    assert len(keypair.fingerprint.split(":")) == 16


@pytest.mark.parametrize("bad", ["ssh-rsa AAAA", "not a key", "", "ssh-ed25519 " + "A" * 20000,
                                 SSH_KEY + "\nssh-rsa second"])
def test_what_is_not_an_ssh_key_is_refused(bad):
    with pytest.raises(InvalidKeypair, match="Keypair data is invalid"):
        keypairs.imported("k", "u1", "ssh", bad)


def test_x509_certificates_have_a_sha1_fingerprint():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "u1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
                   .public_key(key.public_key()).serial_number(1)
                   .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
                   .sign(key, hashes.SHA256()))
    pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
    keypair = keypairs.imported("c", "u1", "x509", pem)
    assert len(keypair.fingerprint.split(":")) == 20
    with pytest.raises(InvalidKeypair):
        keypairs.imported("c", "u1", "x509", SSH_KEY)


def test_a_generated_key_keeps_no_private_half():
    store = FakeStore()
    keypair = keypairs.generate("g", "u1")
    assert keypair.private_key and "PRIVATE KEY" in keypair.private_key
    Keypairs(store).create(keypair, limit=-1)
    stored = store.get(store.keys.keypair("u1", "g")).value
    assert b"PRIVATE" not in stored
    assert Keypairs(store).get("u1", "g").private_key is None


def test_names_are_unique_per_user_and_the_quota_holds():
    store = FakeStore()
    kept = Keypairs(store)
    kept.create(keypairs.imported("a", "u1", "ssh", SSH_KEY), limit=2)
    kept.create(keypairs.imported("a", "u2", "ssh", SSH_KEY), limit=2)
    with pytest.raises(KeypairExists):
        kept.create(keypairs.imported("a", "u1", "ssh", SSH_KEY), limit=2)
    kept.create(keypairs.imported("b", "u1", "ssh", SSH_KEY), limit=2)
    with pytest.raises(TooManyKeypairs):
        kept.create(keypairs.imported("c", "u1", "ssh", SSH_KEY), limit=2)
    assert [k.name for k in kept.list("u1")] == ["a", "b"]
    assert kept.delete("u1", "a") and not kept.delete("u1", "a")
    assert kept.get("u1/..", "a") is None
