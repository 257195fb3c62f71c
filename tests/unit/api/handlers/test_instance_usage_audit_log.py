"""os-instance-usage-audit-log: Nova's answer when no audit task has run (every host not
run, no logs) over the last completed month; admins only; a malformed time is 400."""

from __future__ import annotations

import datetime

from etcd_compute.api.handlers.instance_usage_audit_log import last_completed_period
from tests.unit.api.harness import Harness


def test_no_audit_has_run_on_any_host():
    harness = Harness.new()
    harness.add_host("hv1")
    harness.add_host("hv2")
    log = harness.admin("GET", "/v2.1/os-instance_usage_audit_log").json[
        "instance_usage_audit_logs"]
    assert (log["num_hosts"], log["num_hosts_not_run"], log["hosts_not_run"]) == (
        2, 2, ["hv1", "hv2"])
    assert log["overall_status"] == "0 of 2 hosts done. 0 errors." and log["log"] == {}
    shown = harness.admin("GET", "/v2.1/os-instance_usage_audit_log/2026-03-15%2010:00:00")
    assert shown.json["instance_usage_audit_log"]["period_beginning"] == "2026-02-01 00:00:00"
    assert shown.json["instance_usage_audit_log"]["period_ending"] == "2026-03-01 00:00:00"
    assert harness.admin("GET", "/v2.1/os-instance_usage_audit_log/invalid_time"
                         ).status_int == 400
    assert harness.call("GET", "/v2.1/os-instance_usage_audit_log").status_int == 403


def test_the_last_completed_month():
    assert last_completed_period(datetime.datetime(2026, 1, 5, 1, 2)) == (
        datetime.datetime(2025, 12, 1), datetime.datetime(2026, 1, 1))
