"""The image a request names: a URL, or an image in Glance by name or id.

A Glance image is resolved here, before anything is claimed, as the requesting project
(`scheduler.project_id`) sees it: another project's private image is not found, as Glance
answers that project. It must be active, qcow2 or raw, in a bare (or ovf, booted as
bare, as Nova's libvirt driver does) container, with Glance's sha512 (`os_hash_value`);
the request must claim at least its `min_disk` and `min_ram`, and a disk no smaller than
its virtual size when Glance recorded one. What the spec carries (`glance_image`): id,
name, size, sha512, the Glance endpoint, and the properties Nova's ImagePropertiesFilter
reads (architecture, hypervisor type), never a token. Every refusal is one line (exit 2);
Glance unreachable is exit 3.
"""

from __future__ import annotations

import re
from typing import Any

from etcd_compute.errors import GlanceError, NotFound, UsageError
from etcd_compute.glance import MAX_NAME, GlanceClient

GIB = 1024**3
DISK_FORMATS = ("qcow2", "raw")
CONTAINER_FORMATS = ("bare", "ovf")
PROPERTY = re.compile(r"\A[a-z0-9_]{1,32}\Z")
SHA512 = re.compile(r"\A[0-9a-f]{128}\Z")
# Nova's canonical architecture names for the aliases images use.
ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "i386": "i686", "i486": "i686",
                "i586": "i686", "x86_32": "i686", "arm64": "aarch64", "ppc64el": "ppc64le"}
HV_ALIASES = {"xapi": "xen"}


def is_url(image: str) -> bool:
    """A URL (checked as one by RequestSpec), else a Glance image name or id."""
    return "://" in image


def file_url(endpoint: str, image_id: str) -> str:
    """Where the image's bytes are in Glance (what the spec's `url` says)."""
    return f"{endpoint.rstrip('/')}/v2/images/{image_id}/file"


def _property(image: dict[str, Any], names: tuple[str, ...], aliases: dict[str, str],
              label: str, shown: str) -> str | None:
    for name in names:
        value = image.get(name)
        if value in (None, ""):
            continue
        canonical = str(value).strip().lower().replace("-", "_")
        canonical = aliases.get(canonical, canonical)
        if not PROPERTY.match(canonical):
            raise UsageError(f"image {shown}: property {name}={str(value)[:40]!r} is not a "
                             f"{label} name")
        return canonical
    return None


def resolve(glance: GlanceClient, name_or_id: str, project_id: str,
            resources: dict[str, int]) -> dict[str, Any]:
    """The `glance_image` of `name_or_id` for a request of `project_id` claiming
    `resources`; UsageError (one line) when it cannot be booted from."""
    try:
        image = glance.find(name_or_id, project_id)
    except NotFound:
        raise UsageError(f"--image {name_or_id[:100]!r}: no such image in Glance visible to "
                         f"project {project_id}") from None
    except GlanceError as exc:
        raise UsageError(f"--image {name_or_id[:100]!r}: {exc}") from None
    shown = f"{str(image.get('name') or '')[:100]!r} ({image['id']})"
    if image.get("status") != "active":
        raise UsageError(f"image {shown} is {image.get('status')}, not active")
    if image.get("disk_format") not in DISK_FORMATS:
        raise UsageError(f"image {shown}: disk_format {image.get('disk_format')} cannot be "
                         f"booted (only {' or '.join(DISK_FORMATS)})")
    if image.get("container_format") not in CONTAINER_FORMATS:
        raise UsageError(f"image {shown}: container_format {image.get('container_format')} "
                         f"cannot be booted (only {' or '.join(CONTAINER_FORMATS)})")
    sha512 = image.get("os_hash_value")
    if image.get("os_hash_algo") != "sha512" or not isinstance(sha512, str) or \
            not SHA512.match(sha512):
        raise UsageError(f"image {shown}: Glance holds no sha512 of it (os_hash_value)")
    size = image.get("size")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise UsageError(f"image {shown}: Glance holds no size of it")
    disk_gb, memory_mb = resources.get("DISK_GB", 0), resources.get("MEMORY_MB", 0)
    for needed, claimed, unit in ((image.get("min_disk") or 0, disk_gb, "DISK_GB"),
                                  (image.get("min_ram") or 0, memory_mb, "MEMORY_MB")):
        if claimed < needed:
            kind = "min_disk" if unit == "DISK_GB" else "min_ram"
            raise UsageError(f"image {shown} needs {unit}:{needed} ({kind}); the request "
                             f"claims {unit}:{claimed}")
    virtual = image.get("virtual_size")
    if isinstance(virtual, int) and virtual > disk_gb * GIB:
        raise UsageError(f"image {shown}: virtual size {virtual / GIB:g} GiB is larger than "
                         f"the {disk_gb} GiB disk the request claims (DISK_GB)")
    found: dict[str, Any] = {"id": image["id"], "sha512": sha512, "size": size,
                             "endpoint": glance.endpoint}
    if image.get("name"):
        found["name"] = "".join(c for c in str(image["name"])[:255] if c.isprintable())
    architecture = _property(image, ("hw_architecture", "architecture"), ARCH_ALIASES,
                             "architecture", shown)
    hypervisor = _property(image, ("img_hv_type", "hypervisor_type"), HV_ALIASES,
                           "hypervisor type", shown)
    if architecture:
        found["architecture"] = architecture
    if hypervisor:
        found["hypervisor_type"] = hypervisor
    return found


def spec_image(glance_image: dict[str, Any]) -> dict[str, Any]:
    """The spec's `image` for a resolved Glance image."""
    return {"url": file_url(glance_image["endpoint"], glance_image["id"]), "sha256": None,
            "glance": glance_image}


def properties(image: dict[str, Any] | None) -> dict[str, str]:
    """What the ImagePropertiesFilter compares, from a spec's `image` (or a glance_image)."""
    glance = (image or {}).get("glance", image) or {}
    return {key: glance[key] for key in ("architecture", "hypervisor_type") if key in glance}


def snapshot_image(glance: GlanceClient, spec: dict[str, Any], name: str) -> dict[str, Any]:
    """A queued Glance image for a snapshot of the instance of `spec`, as Nova's createImage
    makes it: owned by the instance's project, private, qcow2 in a bare container,
    `image_type=snapshot`, `instance_uuid`, `base_image_ref` (the Glance image it booted
    from, if any), min_disk its DISK_GB, and its base image's min_ram and the properties the
    ImagePropertiesFilter reads. Returns the task's `snapshot` ({image_id, name})."""
    name = name.strip()
    if not name or len(name) > MAX_NAME or not name.isprintable():
        raise UsageError(f"snapshot name {name[:100]!r}: 1 to {MAX_NAME} printable "
                         "characters")
    base = (spec.get("image") or {}).get("glance") or {}
    fields: dict[str, Any] = {
        "owner": spec["project_id"], "visibility": "private", "image_type": "snapshot",
        "instance_uuid": spec["uuid"],
        "min_disk": int(spec["resources"].get("DISK_GB", 0)),
    }
    if base:
        fields["base_image_ref"] = base["id"]
        for key in ("architecture", "hypervisor_type"):
            if key in base:
                fields[key] = base[key]
        try:
            fields["min_ram"] = int(glance.get(base["id"]).get("min_ram") or 0)
        except NotFound:
            pass  # its base is gone from Glance: the snapshot stands on its own
    made = glance.create(name, "qcow2", "bare", **fields)
    return {"image_id": made["id"], "name": name}
