"""limit and marker, and the `next` link of a page, as Nova's `common` does them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from etcd_compute.api.wsgi import ApiRequest, bad_request

T = TypeVar("T")


def limit_and_marker(req: ApiRequest, max_limit: int) -> tuple[int, str | None]:
    """(limit, marker): at most `max_limit` (Nova's [api] max_limit); 400 if malformed."""
    raw = req.GET.get("limit")
    limit = max_limit
    if raw is not None:
        try:
            limit = int(raw)
        except ValueError:
            raise bad_request("limit param must be an integer") from None
        if limit < 0:
            raise bad_request("limit param must be positive")
    return min(limit, max_limit), req.GET.get("marker")


def page(items: Sequence[T], key: Callable[[T], str], limit: int,
         marker: str | None) -> list[T]:
    """The items after `marker` (an item's key), at most `limit`; 400 for an unknown
    marker (Nova's "marker [X] not found")."""
    start = 0
    if marker is not None:
        for index, item in enumerate(items):
            if key(item) == marker:
                start = index + 1
                break
        else:
            raise bad_request(f"marker [{marker[:100]}] not found")
    return list(items[start:start + limit])


def next_links(req: ApiRequest, shown: Sequence[Any], last_key: Callable[[Any], str],
               collection: str, max_limit: int) -> list[dict[str, str]]:
    """[{"rel": "next", ...}] when the page is full (there may be more), as Nova's."""
    try:
        wanted = min(int(req.GET.get("limit", max_limit)), max_limit)
    except ValueError:
        wanted = max_limit
    if not wanted or wanted != len(shown):
        return []
    params = [(k, v) for k, v in req.GET.items() if k != "marker"]
    params.append(("marker", last_key(shown[-1])))
    project = req.environ.get("etcd_compute.url_project_id")
    parts = [project, *collection.split("/")] if project else collection.split("/")
    return [{"rel": "next", "href": req.url_for("v2.1", *parts) + "?" + urlencode(params)}]
