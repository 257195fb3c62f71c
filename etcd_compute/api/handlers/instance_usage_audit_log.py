"""/os-instance_usage_audit_log[/{before}] (Nova's controller, admins only): the
instance usage audit task's logs per compute host over the last completed month. We run
no audit task (usage is in Placement and our records: os-simple-tenant-usage), so the
answer is Nova's when no host has run it: every host listed as not run, no logs."""

from __future__ import annotations

import datetime
from typing import Any

import webob

from etcd_compute.api import policy
from etcd_compute.api.backend import Backend
from etcd_compute.api.wsgi import ApiRequest, Router, bad_request, json_response


def routes(router: Router, api: Backend) -> None:
    router.add("GET", "/os-instance_usage_audit_log", lambda req: index(api, req))
    router.add("GET", "/os-instance_usage_audit_log/{before}",
               lambda req, before: show(api, req, before))


def last_completed_period(before: datetime.datetime) -> tuple[datetime.datetime,
                                                              datetime.datetime]:
    """Nova's `last_completed_audit_period` (unit month): the month ended before."""
    end = before.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    begin = (end - datetime.timedelta(days=1)).replace(day=1)
    return begin, end


def audit_log(api: Backend, before: datetime.datetime) -> dict[str, Any]:
    begin, end = last_completed_period(before)
    hosts = sorted({c.name for c in api.computes.list(with_resources=False)})
    return {"period_beginning": str(begin), "period_ending": str(end),
            "num_hosts": len(hosts), "num_hosts_done": 0, "num_hosts_running": 0,
            "num_hosts_not_run": len(hosts), "hosts_not_run": hosts, "total_instances": 0,
            "total_errors": 0,
            "overall_status": f"{'ALL' if not hosts else f'0 of {len(hosts)}'} hosts "
                              "done. 0 errors.",
            "log": {}}


def index(api: Backend, req: ApiRequest) -> webob.Response:
    api.policy.authorize(req.context, policy.AUDIT_LOG % "list", {})
    return json_response({"instance_usage_audit_logs": audit_log(api, _now())})


def show(api: Backend, req: ApiRequest, before: str) -> webob.Response:
    api.policy.authorize(req.context, policy.AUDIT_LOG % "show", {})
    try:
        when = datetime.datetime.strptime(
            before, "%Y-%m-%d %H:%M:%S.%f" if "." in before else "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise bad_request(f"Invalid timestamp for date {before[:64]}") from None
    return json_response({"instance_usage_audit_log": audit_log(api, when)})


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
