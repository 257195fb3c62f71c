"""Who this host is in Placement: a uuid generated once and kept, and simulated hosts."""

from __future__ import annotations

import json
import uuid as uuidlib

from etcd_compute.compute.identity import HostIdentity, fake_identities, load_identity
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.keys import UUID


def config_in(state_dir, **compute):
    return deep_merge(COMPUTE_DEFAULTS, {"compute": {"state_dir": str(state_dir),
                                                     "name": "host-a", **compute}})


def test_identity_is_generated_once_and_kept(tmp_path):
    config = config_in(tmp_path / "state")
    first = load_identity(config)
    assert UUID.match(first.uuid) and first.name == "host-a"
    assert load_identity(config) == first
    saved = json.loads((tmp_path / "state" / "identity.json").read_text())
    assert saved == {"uuid": first.uuid}
    assert not list((tmp_path / "state").glob("*.tmp"))


def test_the_kept_uuid_survives_a_rename(tmp_path):
    first = load_identity(config_in(tmp_path))
    renamed = load_identity(config_in(tmp_path, name="host-b"))
    assert (renamed.uuid, renamed.name) == (first.uuid, "host-b")


def test_a_configured_uuid_wins_and_writes_nothing(tmp_path):
    uuid = str(uuidlib.uuid4())
    assert load_identity(config_in(tmp_path, uuid=uuid)) == HostIdentity(uuid, "host-a")
    assert not (tmp_path / "identity.json").exists()


def test_separate_state_dirs_are_separate_hosts(tmp_path):
    assert load_identity(config_in(tmp_path / "a")) != load_identity(config_in(tmp_path / "b"))


def test_simulated_hosts_are_stable_distinct_and_named_after_the_base():
    base = HostIdentity(str(uuidlib.uuid4()), "rack")
    fakes = fake_identities(base, 3)
    assert fake_identities(base, 3) == fakes
    assert len({f.uuid for f in fakes}) == 3 and base.uuid not in {f.uuid for f in fakes}
    assert [f.name for f in fakes] == ["rack-fake-0000", "rack-fake-0001", "rack-fake-0002"]
    assert all(UUID.match(f.uuid) for f in fakes)
    assert fake_identities(base, 5)[:3] == fakes  # more hosts keep the first ones


def test_another_base_gives_other_simulated_hosts():
    a = fake_identities(HostIdentity(str(uuidlib.uuid4()), "x"), 2)
    b = fake_identities(HostIdentity(str(uuidlib.uuid4()), "x"), 2)
    assert not {h.uuid for h in a} & {h.uuid for h in b}
    assert fake_identities(HostIdentity(str(uuidlib.uuid4()), "x"), 0) == []
