"""The local cloud's identities and catalog in Keystone, and `clouds.yaml` for its clients.

What `make up`, `make demo` and the tests' session bootstrap in the local Keystone:

- projects `admin` (Keystone's bootstrap), `service`, `demo`, `alt`;
- roles `admin`, `member`, `reader` (the bootstrap's) and `service`;
- users `admin` (the bootstrap's), `glance` (Glance's own: it validates tokens),
  `etcd-compute` (what the compute hosts and the compute API use to reach Glance and
  Placement as a service), `demo` (member of demo), `alt` (member of alt);
- the catalog: `identity`, `image` and `placement` (the compute API adds `compute`, and
  Neutron's callers `network`: tools/local_services/networking.py; Neutron's own service
  user `neutron` is made by `NeutronServer`).

Passwords are random, kept by the Keystone's run directory (`KeystoneServer.password`).
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from etcd_compute.pki import Pki
from tools.local_services.glance import GLANCE_USER, GlanceServer
from tools.local_services.keystone import DOMAIN, KeystoneServer

PROJECTS = ("admin", "service", "demo", "alt")
SERVICE_ROLE = "service"
SERVICE_USER = "etcd-compute"
# user, project, role (the admin is Keystone's bootstrap's).
USERS = (
    (GLANCE_USER, "service", SERVICE_ROLE),
    (SERVICE_USER, "service", SERVICE_ROLE),
    ("demo", "demo", "member"),
    ("alt", "alt", "member"),
)
# clouds.yaml: cloud name -> (user, project)
CLOUDS = {"etcd-compute": ("admin", "admin"), "etcd-compute-demo": ("demo", "demo"),
          "etcd-compute-alt": ("alt", "alt")}


def bootstrap(keystone: KeystoneServer, glance_url: str | None = None,
              placement_url: str | None = None, compute_url: str | None = None) -> None:
    """Projects, roles, users and catalog entries as above (idempotent)."""
    for project in PROJECTS:
        keystone.add_project(project)
    for user, project, role in USERS:
        keystone.add_user(user, None, project, role)
    keystone.add_service("identity", "keystone", keystone.auth_url)
    if glance_url:
        keystone.add_service("image", "glance", glance_url)
    if placement_url:
        keystone.add_service("placement", "placement", placement_url)
    if compute_url:
        keystone.add_service("compute", "nova", compute_url)


def start(run_dir: Path, pki: Pki | None, placement_url: str | None = None,
          keystone_port: int | None = None,
          glance_port: int | None = None) -> tuple[KeystoneServer, GlanceServer]:
    """Keystone and Glance, started side by side (each spends seconds importing and
    migrating its database), then bootstrapped as above. Both are stopped if either
    fails."""
    keystone = KeystoneServer.create(run_dir / "keystone", keystone_port, pki=pki)
    glance = GlanceServer.create(run_dir / "glance", keystone, glance_port, pki=pki)
    # Every password made now: the two threads would race on the file that keeps them.
    for user in ("admin", *(user for user, _, _ in USERS)):
        keystone.password(user)

    def identity() -> None:
        keystone.start()
        bootstrap(keystone, glance.endpoint, placement_url)

    def images() -> None:
        glance.prepare()
        glance.spawn()
        glance.wait()

    with ThreadPoolExecutor(2) as pool:
        started = [pool.submit(identity), pool.submit(images)]
    failures = [f.exception() for f in started if f.exception() is not None]
    if failures:
        glance.stop()
        keystone.stop()
        raise failures[0]
    return keystone, glance


def service_credentials(keystone: KeystoneServer, user: str = SERVICE_USER) -> dict[str, Any]:
    """A `keystone:` config section for a service user (`glance.keystone` in compute.yaml
    and schedule.yaml: the `etcd-compute` user by default)."""
    return keystone.client_section(user, None, "service")


def glance_config(keystone: KeystoneServer, glance: GlanceServer,
                  user: str = SERVICE_USER) -> dict[str, Any]:
    """A whole `glance:` config section, as the service user."""
    return glance.client_config(service_credentials(keystone, user))


def clouds_yaml(keystone: KeystoneServer) -> dict[str, Any]:
    """clouds.yaml's content: the admin (`etcd-compute`), demo (`etcd-compute-demo`) and alt
    (`etcd-compute-alt`) on their projects, with the CA file."""
    clouds: dict[str, Any] = {}
    for name, (user, project) in CLOUDS.items():
        cloud: dict[str, Any] = {
            "auth": {"auth_url": keystone.auth_url, "username": user,
                     "password": keystone.password(user), "project_name": project,
                     "user_domain_name": DOMAIN, "project_domain_name": DOMAIN},
            "region_name": "RegionOne", "interface": "public", "identity_api_version": 3}
        if keystone.ca_file:
            cloud["cacert"] = keystone.ca_file
        clouds[name] = cloud
    return {"clouds": clouds}


def write_clouds_yaml(keystone: KeystoneServer, path: Path) -> Path:
    """Write clouds.yaml (0600: it holds passwords)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(clouds_yaml(keystone), handle, sort_keys=False)
    return path


TEST_GUEST_IMAGE = "etcd-compute-test-guest"


def upload_image(client: Any, path: Path, name: str, **fields: Any) -> tuple[dict[str, Any],
                                                                               bool]:
    """`path` as the image `name` (public unless `fields` say otherwise), its format read
    from its bytes (qcow2 or raw, as it is); an image of that name with the same content
    (sha512) is kept. Returns (image, uploaded now)."""
    import hashlib

    from oslo_utils.imageutils import format_inspector

    digest = hashlib.sha512()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    for image in client.list(name=name):
        if image.get("os_hash_value") == digest.hexdigest() and image["status"] == "active":
            return image, False
    disk_format = str(format_inspector.detect_file_format(str(path)))
    if disk_format not in ("qcow2", "raw"):
        raise ValueError(f"{path}: a {disk_format} file, not qcow2 or raw")
    image = client.create(name, disk_format, **{"visibility": "public", **fields})
    try:
        with open(path, "rb") as handle:
            client.upload(image["id"], handle, size=path.stat().st_size)
    except BaseException:
        client.delete(image["id"])  # no half image
        raise
    return client.get(image["id"]), True


def upload_test_guest(client: Any, path: Path) -> tuple[dict[str, Any], bool]:
    """The offline test guest (`tools/build-test-guest.sh`) as the public image
    `etcd-compute-test-guest`, with the properties Nova's ImagePropertiesFilter reads."""
    return upload_image(client, path, TEST_GUEST_IMAGE, architecture="x86_64",
                        hypervisor_type="qemu")


def main(argv: list[str] | None = None) -> int:
    """docker.sh's side: `passwords DIR` makes the passwords (once); `bootstrap DIR ...`
    bootstraps a Keystone started elsewhere, as above, and writes clouds.yaml."""
    parser = argparse.ArgumentParser(prog="python -m tools.local_services.cloud")
    parser.add_argument("action", choices=["passwords", "bootstrap"])
    parser.add_argument("directory", help="where passwords.json is kept")
    parser.add_argument("--keystone", help="Keystone's address:port")
    parser.add_argument("--pki", help="the cluster PKI directory (TLS)")
    parser.add_argument("--glance", help="Glance's URL, for the catalog")
    parser.add_argument("--placement", help="Placement's URL, for the catalog")
    parser.add_argument("--clouds", help="write clouds.yaml here")
    parser.add_argument("--compute", help="the compute API's URL, for the catalog")
    parser.add_argument("--api-config", nargs=2, metavar=("OPERATOR_YAML", "API_YAML"),
                        help="write the compute API's config: the operator's, with `api` "
                             "(the etcd-compute user validating tokens; TLS if --pki)")
    args = parser.parse_args(argv)
    address, _, port = (args.keystone or "127.0.0.1:5000").rpartition(":")
    keystone = KeystoneServer.create(Path(args.directory), int(port),
                                     pki=Pki(args.pki) if args.pki else None, address=address)
    for user in ("admin", *(user for user, _, _ in USERS)):
        keystone.password(user)
    if args.action == "bootstrap":
        from keystoneauth1 import exceptions as ks_exceptions

        try:
            bootstrap(keystone, args.glance, args.placement, args.compute)
        except ks_exceptions.ClientException as exc:
            print(f"Keystone at {keystone.auth_url} not ready: {exc.__class__.__name__}",
                  file=sys.stderr)
            return 1
        if args.clouds:
            write_clouds_yaml(keystone, Path(args.clouds))
        if args.api_config:
            write_api_config(keystone, Path(args.api_config[0]), Path(args.api_config[1]),
                             Pki(args.pki) if args.pki else None)
    return 0


def write_api_config(keystone: KeystoneServer, operator: Path, path: Path,
                     pki: Pki | None) -> Path:
    """The compute API's config (`schedule.py --config PATH api`): the operator's
    sections, and `api`: the `etcd-compute` service user validating tokens, the API's TLS
    certificate (`compute-api` of the cluster PKI) if there is a PKI (0600: passwords)."""
    config = yaml.safe_load(operator.read_text()) if operator.exists() else {}
    authtoken = {**service_credentials(keystone), "auth_type": "password"}
    api: dict[str, Any] = {"keystone_authtoken": authtoken}
    if pki is not None:
        authtoken["cafile"] = str(pki.ca_cert)
        api.update(cert=str(pki.directory / "compute-api.crt"),
                   key=str(pki.directory / "compute-api.key"))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump({**(config or {}), "api": api}, handle, sort_keys=False)
    return path


if __name__ == "__main__":
    sys.exit(main())
