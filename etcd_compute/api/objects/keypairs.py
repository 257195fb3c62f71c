"""Keypairs: a user's public keys, kept in etcd (`/keypairs/<user_id>/<name>`).

An imported key is parsed before it is kept (an OpenSSH public key, or an X.509
certificate for `x509`); its fingerprint is Nova's (MD5 of the key blob for ssh, SHA-1
of the certificate for x509). A generated key is an RSA 2048 key as Nova's: its private
half is in the answer only, never stored.
"""

from __future__ import annotations

import base64
import hashlib
import time
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.etcd import (
    Compare,
    Delete,
    KeyValueStore,
    Txn,
    absent,
    none_created_since,
    put_message,
)

# Our spec carries a key of at most this many characters to the host.
MAX_PUBLIC_KEY = 16384


class InvalidKeypair(Exception):
    """The key cannot be used (400, Nova's message)."""


class KeypairExists(Exception):
    """The user has a keypair of this name (409)."""


class TooManyKeypairs(Exception):
    """The user's key_pairs quota is used up (403)."""


@dataclass
class Keypair:
    name: str
    user_id: str
    type: str
    public_key: str
    fingerprint: str
    created_at: float
    private_key: str | None = None

    @classmethod
    def from_message(cls, message: dict[str, Any]) -> Keypair:
        return cls(**message)

    def to_message(self) -> dict[str, Any]:
        return {"name": self.name, "user_id": self.user_id, "type": self.type,
                "public_key": self.public_key, "fingerprint": self.fingerprint,
                "created_at": self.created_at}


def _colons(digest: str) -> str:
    return ":".join(digest[i:i + 2] for i in range(0, len(digest), 2))


def ssh_fingerprint(public_key: str) -> str:
    """Nova's fingerprint of an OpenSSH public key; InvalidKeypair if it is not one."""
    text = public_key.strip()
    if len(text) > MAX_PUBLIC_KEY or "\n" in text or "\r" in text:
        raise InvalidKeypair("Keypair data is invalid: failed to generate fingerprint")
    try:
        serialization.load_ssh_public_key(text.encode())
        blob = base64.b64decode(text.split()[1], validate=True)
    except (ValueError, IndexError, UnicodeEncodeError, TypeError, UnsupportedAlgorithm):
        raise InvalidKeypair("Keypair data is invalid: failed to generate fingerprint") \
            from None
    return _colons(hashlib.md5(blob, usedforsecurity=False).hexdigest())


def x509_fingerprint(certificate: str) -> str:
    """Nova's fingerprint of an X.509 certificate (PEM); InvalidKeypair if it is not one."""
    if len(certificate) > MAX_PUBLIC_KEY:
        raise InvalidKeypair("Keypair data is invalid: failed to generate fingerprint")
    try:
        loaded = x509.load_pem_x509_certificate(certificate.encode())
    except (ValueError, UnicodeEncodeError):
        raise InvalidKeypair("Keypair data is invalid: failed to generate fingerprint") \
            from None
    return _colons(loaded.fingerprint(hashes.SHA1()).hex())  # noqa: S303 (Nova's format)


def generate(name: str, user_id: str) -> Keypair:
    """A new RSA 2048 keypair; the private key is returned once, never stored."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    public = f"{public} Generated-by-Nova"
    return Keypair(name, user_id, "ssh", public, ssh_fingerprint(public), time.time(), private)


def imported(name: str, user_id: str, key_type: str, public_key: str) -> Keypair:
    if key_type == "x509":
        fingerprint = x509_fingerprint(public_key)
    else:
        fingerprint = ssh_fingerprint(public_key)
        public_key = public_key.strip()
    return Keypair(name, user_id, key_type, public_key, fingerprint, time.time())


class Keypairs:
    """Each user's keypairs in etcd."""

    def __init__(self, store: KeyValueStore):
        self.store = store
        self.keys = store.keys

    def list(self, user_id: str) -> list[Keypair]:
        entries, _ = self.store.get_prefix(self.keys.keypairs(user_id))
        found = []
        for entry in entries:
            try:
                found.append(Keypair.from_message(messages.decode(messages.KEYPAIR,
                                                                  entry.value)))
            except InvalidMessage:
                continue
        return sorted(found, key=lambda k: k.name)

    def get(self, user_id: str, name: str) -> Keypair | None:
        if not name or not user_id or "/" in user_id:
            return None
        try:
            message, _ = self.store.read(messages.KEYPAIR, self.keys.keypair(user_id, name))
        except InvalidMessage:
            return None
        return Keypair.from_message(message) if message else None

    def create(self, keypair: Keypair, limit: int) -> Keypair:
        """Keep it: KeypairExists if the name is taken, TooManyKeypairs if the user has
        `limit` already (-1: no limit), counted and written in one transaction."""
        prefix = self.keys.keypairs(keypair.user_id)
        key = self.keys.keypair(keypair.user_id, keypair.name)
        for _ in range(10):
            entries, revision = self.store.get_prefix(prefix, keys_only=True)
            if any(entry.key == key for entry in entries):
                raise KeypairExists(f"Key pair '{keypair.name}' already exists.")
            if limit >= 0 and len(entries) + 1 > limit:
                raise TooManyKeypairs("Quota exceeded, too many key pairs.")
            # No keypair of this user created since we counted: the count holds.
            written = self.store.commit(Txn(
                [absent(key), none_created_since(prefix, revision)],
                [put_message(messages.KEYPAIR, key, keypair.to_message())]))
            if written is not None:
                return keypair
        raise TooManyKeypairs("Quota exceeded, too many key pairs.")

    def delete(self, user_id: str, name: str) -> bool:
        key = self.keys.keypair(user_id, name)
        entry = self.store.get(key)
        if entry is None:
            return False
        return self.store.commit(Txn([Compare(key, "mod", "==", entry.mod_revision)],
                                     [Delete(key)])) is not None
