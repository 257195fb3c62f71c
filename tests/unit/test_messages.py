"""Message schemas: the compiled fast path agrees with jsonschema, errors are one line."""

from __future__ import annotations

import json
import time
import uuid as uuidlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from etcd_compute import messages
from etcd_compute.errors import InvalidMessage
from etcd_compute.schemas import is_valid, validator

RP = str(uuidlib.uuid4())
SPEC = {
    "action": "build", "uuid": str(uuidlib.uuid4()), "name": "web-1", "host": RP,
    "resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1},
    "allocations": {RP: {"resources": {"VCPU": 1, "MEMORY_MB": 256, "DISK_GB": 1}}},
    "image": {"url": "https://example.org/cirros.img", "sha256": None},
    "user_data": None, "ssh_key": None, "project_id": "p", "user_id": "u", "group": None,
    "alternates": [], "requested_at": time.time(),
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3)
    | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=8,
)


def test_a_valid_spec_round_trips():
    assert messages.decode(messages.INSTANCE_SPEC, messages.encode(messages.INSTANCE_SPEC,
                                                                   SPEC)) == SPEC


@pytest.mark.parametrize(
    ("change", "fault"),
    [
        ({"resources": {"VCPU": True}}, "resources.VCPU"),
        ({"resources": {"VCPU": 0}}, "resources.VCPU"),
        ({"resources": {"vcpu": 1}}, "resources"),
        ({"image": {"url": "ftp://x/y"}}, "image.url"),
        ({"action": "reboot"}, "action"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_invalid_specs_name_the_fault_in_one_line(change, fault):
    with pytest.raises(InvalidMessage) as error:
        messages.decode(messages.INSTANCE_SPEC, json.dumps({**SPEC, **change}))
    assert fault in str(error.value) and "\n" not in str(error.value)


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(sorted(SPEC)), value=json_values)
def test_compiled_check_agrees_with_jsonschema(key, value):
    message = {**SPEC, key: value}
    for schema in (messages.INSTANCE_SPEC, messages.INSTANCE_RECORD):
        assert is_valid(schema, message) == validator(schema).is_valid(message)
