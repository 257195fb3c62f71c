"""Nova's parameter types and its boolean strings."""

from __future__ import annotations

from etcd_compute.api.schemas import parameter_types as types


def test_booleans_as_nova_reads_them():
    assert all(types.is_true(v) for v in (True, "True", "1", "yes", "ON"))
    assert not any(types.is_true(v) for v in (False, "false", "0", "no", "maybe", None))
    assert types.multi_params({"type": "string"}) == {"type": "array",
                                                      "items": {"type": "string"}}
    assert types.single_param({"type": "string"})["maxItems"] == 1
