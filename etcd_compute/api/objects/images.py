"""What an imageRef names: an image in Glance the project sees (its id, as Nova takes it),
or a URL under `api.image_url_prefixes`; and the image a snapshot (createImage) makes.

A Glance image is resolved as `scheduler/images.py` resolves `schedule.py --image`: as
the server's project sees it (another project's private image is not found), active,
bootable, within what the flavor claims; what the host gets is its id, sha512, size and
Glance's endpoint, never a token. A URL is taken only under one of the configured
prefixes: a host fetches what a user names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from etcd_compute.errors import EtcdComputeError, UsageError
from etcd_compute.scheduler import images
from etcd_compute.scheduler.spec import IMAGE_URL


class ImageNotFound(Exception):
    """No image of that id visible to the project, and no URL we take (400, Nova's)."""


@dataclass(frozen=True)
class Image:
    """An image a server boots from: `id` as the API shows it; `url` (a URL image) or
    `glance` (a resolved Glance image, what a spec carries)."""

    id: str
    url: str | None = None
    glance: dict[str, Any] | None = None

    def spec_image(self) -> dict[str, Any]:
        """The spec's `image` (a rebuild's), as the scheduler writes it for a create."""
        if self.glance is not None:
            return images.spec_image(self.glance)
        return {"url": self.url, "sha256": None}


class Images:
    def __init__(self, config: dict[str, Any]):
        self.prefixes = list(config["api"]["image_url_prefixes"])
        self.glance = None
        if config["glance"]["keystone"]:
            from etcd_compute.glance import GlanceClient

            self.glance = GlanceClient(config["glance"])

    def find(self, ref: str, project_id: str, resources: dict[str, int]) -> Image:
        """The image `ref` names for a server of `project_id` claiming `resources`:
        ImageNotFound, or UsageError (400) for one that cannot be booted at that size."""
        if "://" in ref:
            if not IMAGE_URL.match(ref) or ".." in ref.split("?")[0] or \
                    not any(ref.startswith(prefix) for prefix in self.prefixes):
                raise ImageNotFound(ref)
            return Image(ref, url=ref)
        if self.glance is None or len(ref) != 36 or ref.count("-") != 4:
            raise ImageNotFound(ref)  # Nova takes image ids, not names
        try:
            found = images.resolve(self.glance, ref, project_id, resources)
        except UsageError as exc:
            if "no such image" in str(exc):
                raise ImageNotFound(ref) from None
            raise
        return Image(found["id"], glance=found)

    def url_of(self, image_id: str) -> str:
        """An image's URL, as Nova's createImage answered it before 2.45."""
        endpoint = self.glance.endpoint if self.glance is not None else ""
        return f"{endpoint.rstrip('/')}/images/{image_id}"

    def snapshot(self, name: str, metadata: dict[str, str]
                 ) -> tuple[Callable[[dict[str, Any]], dict[str, Any]], Callable[[], None]]:
        """(image_for, forget) for a createImage: `image_for(spec)` makes the queued Glance
        image the host uploads into (the instance's project's, Nova's snapshot properties,
        `metadata` as its properties; one only, however often the request is tried);
        `forget()` deletes it when the request was not written."""
        if self.glance is None:
            raise UsageError("Snapshots need Glance: this API has no glance section")
        glance, made = self.glance, []

        def image_for(spec: dict[str, Any]) -> dict[str, Any]:
            forget()
            snapshot = images.snapshot_image(glance, spec, name)
            made.append(snapshot["image_id"])
            if metadata:
                glance.update(snapshot["image_id"], **metadata)
            return snapshot

        def forget() -> None:
            for image_id in made:
                try:
                    glance.delete(image_id)
                except EtcdComputeError:
                    pass  # gone already
            made.clear()

        return image_for, forget
