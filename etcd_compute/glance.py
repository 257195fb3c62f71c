"""A small client for OpenStack Glance's image API v2, as a service user of Keystone.

Reads like the task: `glance.find("etcd-compute-test-guest", project_id)`,
`glance.create(name, ...)` then `glance.upload(image_id, file)`, `glance.download(image_id)`.
The credential is the `glance.keystone` section (the `etcd-compute` service user: Glance
lets the `service` role read every project's images and write them for any owner, as
Nova's service user may); the endpoint is `glance.endpoint`, or the catalog's `image`
service. Whether a project may see an image is decided here from what Glance records
(visibility, owner, members), as Glance's own `is_image_visible` decides it, since the
operator acts for the project without a token of it.

Errors come back as one line: GlanceUnavailable (a ServiceUnavailable) when Glance or
Keystone cannot be reached or refuse us, NotFound, GlanceError for anything else.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from etcd_compute import keystone, metrics
from etcd_compute.errors import ConfigError, GlanceError, GlanceUnavailable, NotFound

# Glance's image name: up to 255 characters (its schema).
MAX_NAME = 255
CHUNK_BYTES = 1024 * 1024
_UUID = re.compile(r"\A[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")


def is_image_id(text: str) -> bool:
    return bool(_UUID.match(text))


def _one_line(text: str) -> str:
    lines = [line.strip() for line in re.sub(r"<[^>]+>", " ", text).splitlines()
             if line.strip()]
    return " ".join(lines)[:300]


def visible_to(image: dict[str, Any], project_id: str, member_of: bool) -> bool:
    """Whether `project_id` may see `image` (Glance's rule, without the admin's bypass):
    public or community images, its own, and shared ones it is a member of."""
    if image.get("visibility") in ("public", "community") or image.get("owner") is None:
        return True
    if image.get("owner") == project_id:
        return True
    return image.get("visibility") == "shared" and member_of


class GlanceClient:
    def __init__(self, glance_config: dict[str, Any]):
        if not glance_config.get("keystone"):
            raise ConfigError("glance.keystone is not set: images by name or id need Glance "
                              "and a service credential (see docs/how-to/operators/compute-api.md)")
        ca = glance_config.get("ca_cert")
        if ca and not Path(ca).is_file():
            raise ConfigError(f"glance.ca_cert {ca}: no such file")
        self.verify: str | bool = ca or True
        self.timeout = glance_config.get("timeout", 30.0)
        self.session = keystone.session(glance_config["keystone"], self.verify, self.timeout)
        self._endpoint = (glance_config.get("endpoint") or "").rstrip("/") or None

    # --- transport -----------------------------------------------------------

    @property
    def endpoint(self) -> str:
        """Glance's URL: configured, or the catalog's `image` service (public)."""
        if self._endpoint is None:
            from keystoneauth1 import exceptions as ks_exceptions

            try:
                found = self.session.get_endpoint(service_type="image", interface="public")
            except ks_exceptions.ClientException as exc:
                raise self._unavailable(f"Keystone: {_one_line(str(exc))}") from None
            if not found:
                raise GlanceUnavailable("no image service in Keystone's catalog; set "
                                        "glance.endpoint")
            self._endpoint = found.rstrip("/")
        return self._endpoint

    def _unavailable(self, why: str) -> GlanceUnavailable:
        metrics.backend_error("glance")
        return GlanceUnavailable(f"Glance: {why}")

    def request(self, method: str, path: str, expect: tuple[int, ...] = (200,),
                stream: bool = False, **kwargs: Any) -> Any:
        from keystoneauth1 import exceptions as ks_exceptions

        url = self.endpoint + path
        try:
            response = self.session.request(url, method, raise_exc=False, stream=stream,
                                            **kwargs)
        except ks_exceptions.Unauthorized:
            raise self._unavailable("Keystone refused our credentials (glance.keystone)"
                                    ) from None
        except ks_exceptions.SSLError as exc:
            raise self._unavailable(f"TLS handshake failed at {url} ({_one_line(str(exc))}); "
                                    "check glance.ca_cert") from None
        except ks_exceptions.ClientException as exc:
            raise self._unavailable(f"{self.endpoint} is unreachable "
                                    f"({exc.__class__.__name__}); check that it runs and "
                                    "glance.endpoint") from None
        if response.status_code in expect:
            return response
        detail = _one_line(response.text)
        if stream:
            response.close()
        where = path.split("?")[0]
        if response.status_code == 404:
            raise NotFound(f"Glance {method} {where}: 404 not found")
        if response.status_code in (401, 403) or response.status_code >= 500:
            raise self._unavailable(f"{method} {where}: {response.status_code} {detail}")
        raise GlanceError(f"Glance {method} {where}: {response.status_code} {detail}",
                          response.status_code)

    # --- images --------------------------------------------------------------

    def get(self, image_id: str) -> dict[str, Any]:
        if not is_image_id(image_id):
            raise NotFound(f"image {image_id!r}: not an image id")
        return self.request("GET", f"/v2/images/{image_id}").json()

    def list(self, **filters: str) -> list[dict[str, Any]]:
        """Every image (the service user sees all projects'), following Glance's pages."""
        images: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": 200, **filters}
        path = "/v2/images"
        while True:
            page = self.request("GET", path, params=params).json()
            images.extend(page.get("images", []))
            following = page.get("next")
            if not following or not following.startswith("/v2/images"):
                return images
            # Glance's `next` is the path of the next page, its query (marker) included.
            path, params = following, None

    def is_member(self, image_id: str, project_id: str) -> bool:
        try:
            self.request("GET", f"/v2/images/{image_id}/members/{project_id}")
        except NotFound:
            return False
        return True

    def can_see(self, image: dict[str, Any], project_id: str) -> bool:
        member = (image.get("visibility") == "shared" and image.get("owner") != project_id
                  and self.is_member(image["id"], project_id))
        return visible_to(image, project_id, member)

    def find(self, name_or_id: str, project_id: str) -> dict[str, Any]:
        """The image `name_or_id` as `project_id` sees it: by id, else the one image of that
        name it may see. NotFound if it may see none (another project's private image is
        not found, as Glance answers that project), GlanceError if several."""
        if is_image_id(name_or_id):
            try:
                image = self.get(name_or_id)
            except NotFound:
                image = None
            if image is not None and self.can_see(image, project_id):
                return image
        if len(name_or_id) > MAX_NAME:
            raise NotFound(f"image {name_or_id[:40]!r}...: no such image")
        named = [image for image in self.list(name=name_or_id)
                 if self.can_see(image, project_id)]
        if not named:
            raise NotFound(f"image {name_or_id!r}: no such image visible to project "
                           f"{project_id}")
        if len(named) > 1:
            raise GlanceError(f"image {name_or_id!r}: {len(named)} images of that name; "
                              "name one by its id")
        return named[0]

    def create(self, name: str, disk_format: str, container_format: str = "bare",
               **fields: Any) -> dict[str, Any]:
        """A queued image record (no data yet): Glance's own fields and properties."""
        body = {"name": name, "disk_format": disk_format,
                "container_format": container_format, **fields}
        return self.request("POST", "/v2/images", expect=(201,), json=body).json()

    def upload(self, image_id: str, data: IO[bytes] | Iterator[bytes],
               size: int | None = None) -> None:
        """The image's bytes, streamed in 1 MiB chunks (Glance computes its size and
        os_hash_value). `size`: what the caller expects, checked against Glance's record."""
        headers = {"Content-Type": "application/octet-stream"}
        if hasattr(data, "read"):
            # A file is sent in http.client's 8 KiB blocks; 1 MiB ones cost far less CPU
            # through TLS. (Chunked: an iterator's length is not known to requests.)
            data = iter(lambda handle=data: handle.read(CHUNK_BYTES), b"")
        self.request("PUT", f"/v2/images/{image_id}/file", expect=(204,), data=data,
                     headers=headers, timeout=None)
        if size is not None:
            stored = self.get(image_id).get("size")
            if stored != size:
                raise GlanceError(f"Glance image {image_id}: {stored} bytes stored, "
                                  f"{size} sent")

    def update(self, image_id: str, **changes: Any) -> dict[str, Any]:
        """Set fields and properties (JSON patch `add`, which also replaces)."""
        patch = [{"op": "add", "path": f"/{key}", "value": value}
                 for key, value in changes.items()]
        return self.request(
            "PATCH", f"/v2/images/{image_id}", json=patch,
            headers={"Content-Type": "application/openstack-images-v2.1-json-patch"}).json()

    def remove_properties(self, image_id: str, names: list[str]) -> dict[str, Any]:
        """Remove properties (JSON patch `remove`; each must be there)."""
        patch = [{"op": "remove", "path": f"/{name}"} for name in names]
        return self.request(
            "PATCH", f"/v2/images/{image_id}", json=patch,
            headers={"Content-Type": "application/openstack-images-v2.1-json-patch"}).json()

    def delete(self, image_id: str) -> None:
        self.request("DELETE", f"/v2/images/{image_id}", expect=(204,))

    def download(self, image_id: str, timeout: tuple[float, float] | None = None) -> Any:
        """The image's bytes as a streamed response (`iter_content`); close it when done."""
        return self.request("GET", f"/v2/images/{image_id}/file", stream=True,
                            timeout=timeout or (10.0, 60.0))


def rotate_backups(glance: GlanceClient, instance_uuid: str, backup_type: str, keep: int
                   ) -> list[str]:
    """Nova's backup rotation (its compute manager's `_rotate_backups`): the instance's
    backups of `backup_type` beyond the newest `keep` are deleted. The ids deleted."""
    found = glance.list(instance_uuid=instance_uuid, backup_type=backup_type,
                        image_type="backup", sort_key="created_at", sort_dir="desc")
    found = [image for image in found if image.get("instance_uuid") == instance_uuid and
             image.get("backup_type") == backup_type and image.get("image_type") == "backup"]
    deleted = []
    for image in found[keep:]:
        try:
            glance.delete(image["id"])
        except NotFound:
            continue  # deleted meanwhile
        deleted.append(image["id"])
    return deleted

