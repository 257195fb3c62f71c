"""The versions documents (Nova's shape)."""

from __future__ import annotations

import webob

from etcd_compute.api.handlers import versions


def test_index_lists_the_legacy_v20_first_and_show_has_its_media_type():
    req = webob.Request.blank("/")
    listed = versions.index(req).json["versions"]
    assert [(v["id"], v["status"]) for v in listed] == [("v2.0", "SUPPORTED"),
                                                         ("v2.1", "CURRENT")]
    assert [v["links"][0]["href"] for v in listed] == ["http://localhost/v2/",
                                                       "http://localhost/v2.1/"]
    legacy = versions.show(webob.Request.blank("/v2"), legacy=True).json["version"]
    assert (legacy["id"], legacy["version"], legacy["min_version"]) == ("v2.0", "", "")
    shown = versions.show(webob.Request.blank("/v2.1")).json["version"]
    assert shown["links"][0] == {"rel": "self", "href": "http://localhost/v2.1/"}
    assert shown["links"][1]["rel"] == "describedby"
    # The module's document is not changed by a request.
    assert versions.V21["links"][0]["rel"] == "describedby"
