"""schedule.py's zone options: --zone's three meanings, zone options only where they go
(the zone commands' parsers)."""

from __future__ import annotations

import pytest

from etcd_compute.cli import schedule
from etcd_compute.cli import zones as zones_cli
from etcd_compute.config import deep_merge
from etcd_compute.defaults import SCHEDULE_DEFAULTS
from etcd_compute.errors import UsageError

CONFIG = deep_merge(SCHEDULE_DEFAULTS, {"zones": {"name": "hq"}})
AGGREGATE = "8ad8abc4-28c1-4ab8-b74d-3ec051a1242d"


@pytest.mark.parametrize(("value", "meaning"), [
    (None, (None, None)),
    (AGGREGATE, (AGGREGATE, None)),  # an availability zone, as before zones
    ("hq", (None, "")),  # this zone's own hosts
    ("lab2", (None, "lab2")),
    ("lab2/rack-1", (None, "lab2/rack-1")),
])
def test_zone_option(value, meaning):
    assert zones_cli.zone_option(value, CONFIG) == meaning


@pytest.mark.parametrize("value", ["Lab", "a//b", "a/../b", "x" * 40, "/a", "a/"])
def test_a_bad_zone_option_is_a_usage_error(value):
    with pytest.raises(UsageError, match="expected an aggregate uuid, this zone's name, or a "
                                         r"zone below it \(a, a/b\)"):
        zones_cli.zone_option(value, CONFIG)


@pytest.mark.parametrize(("argv", "fault"), [
    (["list", "--etcd", "h:1"], "--etcd goes with zone add"),
    (["zone", "list", "--cert-key", "k"], "--cert-key goes with zone add"),
    (["zone", "add", "x", "--force"], "--force goes with zone delete"),
])
def test_zone_options_go_with_their_command(argv, fault):
    with pytest.raises(UsageError, match=fault):
        schedule.parse_args(argv)


def test_zone_options_where_they_go():
    added = schedule.parse_args(["zone", "add", "x", "--etcd", "h:1", "--cert-key", "k",
                                 "--timeout", "2"])
    assert (added.command, added.action, added.name, added.etcd, added.cert_key,
            added.timeout) == ("zone", "add", "x", "h:1", "k", 2.0)
    deleted = schedule.parse_args(["zone", "delete", "x", "--force"])
    assert (deleted.action, deleted.name, deleted.force) == ("delete", "x", True)
