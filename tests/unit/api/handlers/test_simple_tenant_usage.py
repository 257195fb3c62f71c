"""os-simple-tenant-usage: hours and sizes of launched servers within the period, per
project; admins list every project's, readers see their own; Nova's refusals; 2.40 paging."""

from __future__ import annotations

import datetime

from tests.unit.api.harness import Harness


def _period(hours_before: float = 1, hours_after: float = 1) -> str:
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    fmt = "%Y-%m-%dT%H:%M:%S.%f"
    return (f"start={(now - datetime.timedelta(hours=hours_before)).strftime(fmt)}"
            f"&end={(now + datetime.timedelta(hours=hours_after)).strftime(fmt)}")


def _harness() -> tuple[Harness, list[str]]:
    harness = Harness.new()
    harness.add_host()
    harness.add_flavor()
    made = []
    for name, project in (("a", "p1"), ("b", "p1"), ("c", "p2")):
        uuid = harness.boot(name=name, project=project)
        harness.activate(uuid)
        made.append(uuid)
    harness.boot(name="never-launched")
    return harness, made


def test_usage_per_project():
    harness, made = _harness()
    listed = harness.admin("GET", f"/v2.1/os-simple-tenant-usage?{_period()}&detailed=1")
    usages = {u["tenant_id"]: u for u in listed.json["tenant_usages"]}
    assert sorted(usages) == ["p1", "p2"]
    assert len(usages["p1"]) == 8
    assert [s["instance_id"] for s in usages["p1"]["server_usages"]] == made[:2]
    server = usages["p1"]["server_usages"][0]
    assert (server["vcpus"], server["memory_mb"], server["local_gb"], server["flavor"],
            server["state"], server["ended_at"]) == (1, 256, 1, "m1.tiny", "active", None)
    # As Nova: a running server is counted to the period's end (an hour from now).
    assert 0.99 < server["hours"] < 1.01
    assert usages["p1"]["total_vcpus_usage"] == sum(
        s["hours"] for s in usages["p1"]["server_usages"])
    brief = harness.admin("GET", f"/v2.1/os-simple-tenant-usage?{_period()}").json
    assert "server_usages" not in brief["tenant_usages"][0]
    mine = harness.call("GET", f"/v2.1/os-simple-tenant-usage/p1?{_period()}").json
    assert len(mine["tenant_usage"]["server_usages"]) == 2
    # A period before anything launched: nothing.
    assert harness.call("GET", f"/v2.1/os-simple-tenant-usage/p1?"
                               f"{_period(5, -4)}").json == {"tenant_usage": {}}


def test_refusals_and_paging():
    harness, made = _harness()
    assert harness.call("GET", f"/v2.1/os-simple-tenant-usage?{_period()}").status_int == 403
    assert harness.call("GET", f"/v2.1/os-simple-tenant-usage/p2?{_period()}",
                        ).status_int == 403
    assert harness.admin("GET", f"/v2.1/os-simple-tenant-usage/p1?{_period(-2, -1)}"
                         ).status_int == 400  # start after end
    assert harness.admin("GET", "/v2.1/os-simple-tenant-usage/p1?start=yesterday"
                         ).status_int == 400
    assert harness.admin("GET", f"/v2.1/os-simple-tenant-usage/?{_period()}").status_int == 404
    page = harness.admin("GET", f"/v2.1/os-simple-tenant-usage?{_period()}&detailed=1"
                                "&limit=2", version="2.40").json
    assert [s["instance_id"] for u in page["tenant_usages"] for s in u["server_usages"]] == \
        made[:2]
    assert "marker=" + made[1] in page["tenant_usages_links"][0]["href"]
    rest = harness.admin("GET", f"/v2.1/os-simple-tenant-usage?{_period()}&detailed=1"
                                f"&limit=2&marker={made[1]}", version="2.40").json
    assert [u["tenant_id"] for u in rest["tenant_usages"]] == ["p2"]
    assert harness.admin("GET", f"/v2.1/os-simple-tenant-usage?{_period()}&marker=x",
                         version="2.40").status_int == 400
