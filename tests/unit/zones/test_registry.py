"""Zone records: names and paths, what a record may hold, credential files checked as ssh
checks keys, a record read back as untrusted input, delete refused while instances stay."""

from __future__ import annotations

import os

import pytest

from etcd_compute import messages
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import ConfigError, UsageError
from etcd_compute.pki import OPERATOR, Pki
from etcd_compute.zones import registry
from tests.unit.fakes import FakeStore


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    pki = Pki(tmp_path_factory.mktemp("zone-pki"))
    pki.init("zone")
    pki.issue("operator", OPERATOR)
    return pki


def entry(pki, name="lab", **files):
    defaults = {"ca_cert": str(pki.ca_cert), "cert": str(pki.cert("operator")),
                "key": str(pki.key("operator"))}
    return registry.record(name, ["10.0.0.1:2379"], "/p", "https://10.0.0.1:8080",
                           **{**defaults, **files})


@pytest.mark.parametrize("path, fault", [
    ("A", "'A'"), ("a b", "'a b'"), ("a//b", "''"), ("-a", "'-a'"),
    ("0123456789abcdef0123456789abcdef0", "'0123456789abcdef0123456789abcdef0'"),
    ("a/" * 8 + "a", "deeper than 8 zones"),
    ("8ad8abc4-28c1-4ab8-b74d-3ec051a1242d", "a zone name is 1-32"),
])
def test_bad_names_and_paths(path, fault):
    with pytest.raises(UsageError, match=fault):
        registry.parse_path(path)


def test_a_record_holds_paths_never_keys(pki):
    made = entry(pki)
    assert made["etcd"]["key"] == str(pki.key("operator"))
    assert made["placement"]["cert"] == str(pki.cert("operator"))
    messages.check(messages.ZONE, made)
    with pytest.raises(UsageError, match=r"zone add lab: placement.endpoint"):
        registry.record("lab", ["h:1"], "", "ftp://h")
    with pytest.raises(UsageError, match=r"etcd.endpoints.0"):
        registry.record("lab", ["h:1/x"], "", "http://h")
    with pytest.raises(UsageError, match="etcd.prefix"):
        registry.record("lab", ["h:1"], "no-slash", "http://h")


def test_credential_files_are_checked_like_ssh_keys(pki, tmp_path):
    loose = tmp_path / "loose.key"
    loose.write_bytes(pki.key("operator").read_bytes())
    os.chmod(loose, 0o640)
    with pytest.raises(ConfigError, match="a private key readable by group or others "
                                          r"\(mode 0640\); chmod 600 it"):
        entry(pki, key=str(loose))
    shared = tmp_path / "ca.crt"
    shared.write_bytes(pki.ca_cert.read_bytes())
    os.chmod(shared, 0o666)
    with pytest.raises(ConfigError, match=r"writable by group or others \(mode 0666\)"):
        entry(pki, ca_cert=str(shared))
    with pytest.raises(ConfigError, match="not a regular file"):
        entry(pki, ca_cert=str(tmp_path))
    with pytest.raises(ConfigError, match="a client certificate needs the zone's CA"):
        entry(pki, ca_cert=None)
    with pytest.raises(ConfigError, match="does not match"):
        other = Pki(tmp_path / "other")
        other.init()
        entry(pki, key=str(other.issue("operator", OPERATOR).key))
    # Through a symlink, the file itself is checked.
    link = tmp_path / "link.key"
    link.symlink_to(loose)
    with pytest.raises(ConfigError, match="readable by group or others"):
        entry(pki, key=str(link))


def test_below_a_child_only_files_under_credential_dirs_are_used(pki, tmp_path):
    made = entry(pki)
    registry.check_credentials(made)  # this zone's own operator recorded it
    registry.check_credentials(made, [str(pki.directory)])
    with pytest.raises(ConfigError, match="is not under zones.credential_dirs"):
        registry.check_credentials(made, [str(tmp_path / "elsewhere")])
    # A prefix of the directory's name is not the directory.
    with pytest.raises(ConfigError, match="is not under zones.credential_dirs"):
        registry.check_credentials(made, [str(pki.directory)[:-2]])


def test_a_childs_config_is_built_from_defaults_not_the_parents_secrets(pki):
    parent = {**SCHEDULE_DEFAULTS, "etcd": {**SCHEDULE_DEFAULTS["etcd"], "user": "me",
                                            "password": "secret"},
              "placement": {**SCHEDULE_DEFAULTS["placement"], "keystone": {"auth_url": "x"}}}
    config = registry.client_config(parent, entry(pki))
    assert config["etcd"]["user"] is None and config["etcd"]["password"] is None
    assert config["placement"]["keystone"] is None
    assert config["etcd"]["endpoints"] == ["10.0.0.1:2379"] and config["etcd"]["prefix"] == "/p"
    assert config["scheduler"] == parent["scheduler"]


def test_records_read_back_are_untrusted(pki):
    store = FakeStore("/z")
    registry.add(store, entry(pki))
    with pytest.raises(UsageError, match="zone lab exists"):
        registry.add(store, entry(pki))
    store.put_raw(store.keys.zone("other"), store.get(store.keys.zone("lab")).value)
    store.put_raw(store.keys.zone("bad"), "{\"name\": \"bad\"}")
    store.put_raw(store.keys.zone("\x1b[2J"), "{}")
    found, faults = registry.read_all(store)
    assert list(found) == ["lab"]
    assert faults["other"] == "its record names another zone (lab)"
    assert faults["bad"].startswith("its record is unreadable (zone: ")
    assert "'\\x1b[2J'" in faults


def test_delete_is_refused_while_instances_placed_there_remain(pki):
    store = FakeStore()
    registry.add(store, entry(pki))
    registry.add(store, entry(pki, name="lab2"))
    for uuid, where in (("00000000-0000-4000-8000-000000000001", "lab"),
                        ("00000000-0000-4000-8000-000000000002", "lab/deeper"),
                        ("00000000-0000-4000-8000-000000000003", "lab2")):
        store.put(messages.ZONE_INSTANCE, store.keys.zone_of(uuid), {"zone": where})
    with pytest.raises(registry.ZoneHoldsInstances, match="zone lab holds 2 instance"):
        registry.delete(store, "lab")
    assert registry.delete(store, "lab", force=True) == [
        "00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002"]
    assert store.get(store.keys.zone("lab")) is None
    assert registry.count_placed(store, "lab2") == ["00000000-0000-4000-8000-000000000003"]
    with pytest.raises(UsageError, match="no zone 'lab'"):
        registry.delete(store, "lab")
