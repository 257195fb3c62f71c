"""What the metadata server answers a guest, from its meta.json: EC2 and OpenStack paths."""

from __future__ import annotations

import json

import pytest

from etcd_compute.mdserver.content import render

META = {
    "uuid": "11111111-2222-3333-4444-555555555555",
    "name": "Web 1",
    "hostname": "web-1",
    "user_data": "#!/bin/sh\necho hi\n",
    "ssh_key": "ssh-ed25519 AAAA me",
}
BARE = {**META, "user_data": None, "ssh_key": None}
TEXT = "text/plain; charset=utf-8"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/latest/meta-data/", "instance-id\nhostname\nlocal-hostname\nlocal-ipv4\npublic-ipv4\n"
                                "public-keys/\n"),
        ("/latest/meta-data/instance-id", META["uuid"]),
        ("/2009-04-04/meta-data/instance-id", META["uuid"]),
        ("/latest/meta-data/hostname", "web-1"),
        ("/latest/meta-data/local-hostname", "web-1"),
        ("/latest/meta-data/public-keys/", "0=key\n"),
        ("/latest/meta-data/public-keys/0/openssh-key", "ssh-ed25519 AAAA me\n"),
        ("/latest/user-data", "#!/bin/sh\necho hi\n"),
    ],
)
def test_ec2_paths(path: str, body: str) -> None:
    assert render(path, META) == (TEXT, body.encode())


@pytest.mark.parametrize(("path", "body"), [("/", "latest\n"), ("", "latest\n"),
                                            ("/latest", "meta-data/\nuser-data\n"),
                                            ("/latest/", "meta-data/\nuser-data\n"),
                                            ("/openstack", "latest\n"),
                                            ("/openstack/", "latest\n"),
                                            ("/openstack/latest/",
                                             "meta_data.json\npassword\nuser_data\n")])
def test_indexes_list_what_is_there(path: str, body: str) -> None:
    assert render(path, META) == (TEXT, body.encode())


def test_indexes_leave_out_what_the_instance_does_not_have() -> None:
    assert render("/latest/", BARE) == (TEXT, b"meta-data/\n")
    assert render("/latest/meta-data", BARE) == (
        TEXT, b"instance-id\nhostname\nlocal-hostname\nlocal-ipv4\npublic-ipv4\n")
    assert render("/openstack/latest", BARE) == (TEXT, b"meta_data.json\npassword\n")


def test_openstack_meta_data_json() -> None:
    content_type, body = render("/openstack/latest/meta_data.json", META)
    assert content_type == "application/json"
    document = json.loads(body)
    assert document["uuid"] == META["uuid"]
    assert document["hostname"] == "web-1"
    assert document["name"] == "Web 1"
    assert document["public_keys"] == {"key": "ssh-ed25519 AAAA me"}


def test_openstack_meta_data_json_without_a_key_has_no_keys() -> None:
    _content_type, body = render("/openstack/2018-08-27/meta_data.json", BARE)
    assert json.loads(body)["public_keys"] == {}


def test_openstack_user_data() -> None:
    assert render("/openstack/latest/user_data", META) == (TEXT, META["user_data"].encode())
    assert render("/openstack/latest/user_data", BARE) is None


def test_an_empty_user_data_is_served_empty_not_missing() -> None:
    assert render("/latest/user-data", {**META, "user_data": ""}) == (TEXT, b"")


def test_unknown_paths_and_missing_data_are_404() -> None:
    assert render("/latest/user-data", BARE) is None
    assert render("/latest/meta-data/public-keys/0/openssh-key", BARE) is None
    assert render("/latest/meta-data/public-keys/", BARE) is None
    assert render("/latest/meta-data/../../etc/passwd", META) is None
    assert render("/nothing", META) is None
    assert render("/20xx-01-01/meta-data/instance-id", META) is None
    assert render("/openstack/latest/vendor_data.json", META) is None
    assert render("/latestmeta-data/instance-id", META) is None
