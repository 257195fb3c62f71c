"""Whatever is stored in etcd, a read of it through the Store raises nothing but
InvalidMessage (real etcd): values nested ~50,000 deep once raised RecursionError out of
messages.decode and took a compute host down."""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage

HOSTILE = {
    "nested 50,000 deep": b"[" * 50_000 + b"]" * 50_000,
    "nested objects": b'{"uuid":' * 20_000 + b"1" + b"}" * 20_000,
    "a float amount": json.dumps({"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f",
                                  "state": "ACTIVE", "updated_at": 1.0,
                                  "resources": {"MEMORY_MB": 256.0}}).encode(),
    "a newline-suffixed uuid": json.dumps({"uuid": "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f\n",
                                           "state": "ACTIVE", "updated_at": 1.0}).encode(),
    # one byte over messages.MAX_MESSAGE_BYTES
    "too large": b'{"x":"' + b"a" * (1024 * 1024 + 1) + b'"}',
}


@pytest.mark.parametrize("raw", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_stored_value_reads_as_invalid_message(store, etcd_prefix: str,
                                                        raw: bytes) -> None:
    uuid = str(uuidlib.uuid4())
    key = f"{etcd_prefix}/hostile/{uuid}"  # any key: the read is what is tested
    store.client.put(key, raw)
    with pytest.raises(InvalidMessage) as caught:
        store.read(messages.INSTANCE_RECORD, key)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 300
    # A listing skips it and goes on.
    assert uuid not in store.read_prefix(messages.INSTANCE_RECORD, key.rsplit("/", 1)[0] + "/")
