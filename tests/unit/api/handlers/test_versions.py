"""The versions documents (Nova's shape)."""

from __future__ import annotations

import webob

from etcd_compute.api.handlers import versions


def test_index_lists_v21_only_and_show_has_its_media_type():
    req = webob.Request.blank("/")
    listed = versions.index(req).json["versions"]
    assert [v["id"] for v in listed] == ["v2.1"] and listed[0]["status"] == "CURRENT"
    shown = versions.show(webob.Request.blank("/v2.1")).json["version"]
    assert shown["links"][0] == {"rel": "self", "href": "http://localhost/v2.1/"}
    assert shown["links"][1]["rel"] == "describedby"
    # The module's document is not changed by a request.
    assert versions.V21["links"][0]["rel"] == "describedby"
