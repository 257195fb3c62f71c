"""Instance actions as Nova shows them: times, fields per microversion, event details."""

from __future__ import annotations

import webob

from etcd_compute.api.microversion import Version
from etcd_compute.api.objects.instance_actions import Action
from etcd_compute.api.views import instance_actions as view
from etcd_compute.api.wsgi import ApiRequest

ACTION = Action("stop", "compute_stop_instance", "req-1", "u", "u1", "p1", 0.5, 1.25, 1.25,
                "Error", "Error", "would not stop", "0b5d6c43", "hv1")


def at(version: str) -> ApiRequest:
    req = ApiRequest(webob.Request.blank("/").environ)
    req.environ["etcd_compute.version"] = Version.parse(version)
    return req


def test_times_are_novas():
    assert view.nova_time(1.25) == "1970-01-01T00:00:01.250000"
    assert view.nova_time(None) is None


def test_fields_follow_the_microversion():
    assert "updated_at" not in view.action(at("2.57"), ACTION)
    assert view.action(at("2.58"), ACTION)["updated_at"] == "1970-01-01T00:00:01.250000"
    member = view.event(at("2.62"), ACTION, "p1", traceback=False, host=False)
    assert set(member) == {"event", "start_time", "finish_time", "result", "hostId"}
    admin = view.event(at("2.62"), ACTION, "p1", traceback=True, host=True)
    assert (admin["traceback"], admin["host"]) == ("would not stop", "hv1")
    assert "hostId" not in view.event(at("2.61"), ACTION, "p1", traceback=True, host=False)
