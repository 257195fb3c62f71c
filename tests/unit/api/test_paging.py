"""limit, marker and the next link, as Nova's."""

from __future__ import annotations

import pytest

from etcd_compute.api import paging
from etcd_compute.api.wsgi import ApiRequest, Fault


def test_limit_is_capped_and_checked():
    assert paging.limit_and_marker(ApiRequest.blank("/x"), 1000) == (1000, None)
    assert paging.limit_and_marker(ApiRequest.blank("/x?limit=5000&marker=m"), 1000) == \
        (1000, "m")
    for bad in ("x", "-1"):
        with pytest.raises(Fault):
            paging.limit_and_marker(ApiRequest.blank(f"/x?limit={bad}"), 1000)


def test_a_page_starts_after_its_marker_and_an_unknown_marker_is_400():
    items = ["a", "b", "c", "d"]
    assert paging.page(items, str, 2, None) == ["a", "b"]
    assert paging.page(items, str, 2, "b") == ["c", "d"]
    with pytest.raises(Fault, match="marker \\[z\\] not found"):
        paging.page(items, str, 2, "z")


def test_a_full_page_links_to_the_next():
    req = ApiRequest.blank("/v2.1/servers?limit=2&name=web")
    links = paging.next_links(req, ["a", "b"], str, "servers", 1000)
    assert links == [{"rel": "next",
                      "href": "http://localhost/v2.1/servers?limit=2&name=web&marker=b"}]
    assert paging.next_links(req, ["a"], str, "servers", 1000) == []
