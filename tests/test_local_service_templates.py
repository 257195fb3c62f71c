"""The tests' Keystone, Placement and Glance start from prepared state (templates.py: the
manage commands' database made once per virtualenv, then copied): a service started from a
template is the service a fresh start makes, and a damaged or unmakeable template is not
used (the start runs the manage commands, as before).

Each test keeps its templates in a cache of its own (`ETCD_COMPUTE_CACHE`), so it builds
them once itself."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from keystoneauth1 import exceptions as ks_exceptions

from tests.support import unavailable
from tools.local_services import (
    KEYSTONE_VENV,
    PLACEMENT_VENV,
    KeystoneServer,
    PlacementServer,
)
from tools.local_services import keystone as keystone_module
from tools.local_services import placement as placement_module
from tools.local_services.templates import MANIFEST, Template


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A template cache of this test's own."""
    monkeypatch.setenv("ETCD_COMPUTE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "templates"


@pytest.fixture
def started() -> Iterator[list[Any]]:
    """Services to stop (by pid) after the test, whatever it did."""
    servers: list[Any] = []
    yield servers
    for server in servers:
        server.stop()


def needs(venv: Path, what: str) -> None:
    if not (venv / "bin" / "gunicorn").exists():
        unavailable(f"{what} is not installed in {venv} (make install)")


def start(started: list[Any], server: Any) -> Any:
    started.append(server)
    return server.start()


def identity(server: KeystoneServer) -> dict[str, Any]:
    """What bootstrap made in `server`, by names (ids differ between Keystones), as its
    admin sees it through the API; endpoints by whether they name `server` itself."""
    session = server.session()

    def get(path: str) -> dict[str, Any]:
        return session.get(server.auth_url + path, raise_exc=True).json()

    roles = {role["id"]: role for role in get("/roles")["roles"]}
    projects = {project["id"]: project for project in get("/projects")["projects"]}
    users = {user["id"]: user for user in get("/users")["users"]}
    services = {service["id"]: service for service in get("/services")["services"]}

    def scope(assignment: dict[str, Any]) -> str:
        where = assignment["scope"]
        if "project" in where:
            return "project " + projects[where["project"]["id"]]["name"]
        return json.dumps(where, sort_keys=True)

    return {
        "domains": sorted((d["id"], d["name"], d["enabled"]) for d in get("/domains")["domains"]),
        "projects": sorted((p["name"], p["domain_id"], p["enabled"], p["is_domain"],
                            p["description"]) for p in projects.values()),
        "users": sorted((u["name"], u["domain_id"], u["enabled"], u["password_expires_at"],
                         json.dumps(u.get("options"), sort_keys=True))
                        for u in users.values()),
        "roles": sorted((r["name"], r["domain_id"], json.dumps(r["options"], sort_keys=True))
                        for r in roles.values()),
        "implied roles": sorted((inference["prior_role"]["name"], implied["name"])
                                for inference in get("/role_inferences")["role_inferences"]
                                for implied in inference["implies"]),
        "assignments": sorted((users[a["user"]["id"]]["name"], roles[a["role"]["id"]]["name"],
                               scope(a)) for a in get("/role_assignments")["role_assignments"]),
        "regions": sorted(r["id"] for r in get("/regions")["regions"]),
        "services": sorted((s["type"], s["name"], s["enabled"]) for s in services.values()),
        "endpoints": sorted((services[e["service_id"]]["name"], e["interface"], e["region_id"],
                             e["enabled"], e["url"] == server.auth_url)
                            for e in get("/endpoints")["endpoints"]),
    }


def validates(server: KeystoneServer, token: str) -> int:
    """The status of `server` validating `token` (as its admin)."""
    return requests.get(server.auth_url + "/auth/tokens", timeout=30, headers={
        "X-Auth-Token": server.session().get_token(), "X-Subject-Token": token}).status_code


def test_a_keystone_from_the_template_is_the_one_a_fresh_start_makes(tmp_path, cache,
                                                                     monkeypatch, started):
    needs(KEYSTONE_VENV, "Keystone")
    monkeypatch.setenv("ETCD_COMPUTE_CACHE", "")  # no templates: keystone-manage throughout
    fresh = start(started, KeystoneServer.create(tmp_path / "fresh"))
    assert not cache.exists()
    monkeypatch.setenv("ETCD_COMPUTE_CACHE", str(cache.parent))
    first = start(started, KeystoneServer.create(tmp_path / "first"))  # builds the template
    second = start(started, KeystoneServer.create(tmp_path / "second"))  # copies it
    template = keystone_module.template().directory
    assert template is not None and (template / MANIFEST).exists()
    assert len({fresh.port, first.port, second.port}) == 3

    reference = identity(fresh)
    assert ("keystone", "admin", "RegionOne", True, True) in reference["endpoints"]
    for server in (first, second):
        assert identity(server) == reference
        session = server.session()
        catalog = session.auth.get_access(session).service_catalog.catalog
        assert {e["url"] for s in catalog for e in s["endpoints"]} == {server.auth_url}
        # Its admin's password is its run directory's; the template's no longer logs in.
        with pytest.raises(ks_exceptions.Unauthorized):
            server.session(password=(template / keystone_module.TEMPLATE_PASSWORD)
                           .read_text()).get_token()
        keys = server.run_dir / "fernet-keys"
        assert sorted(os.listdir(keys)) == ["0", "1"]
        assert (keys.stat().st_mode & 0o777, (keys / "1").stat().st_mode & 0o777) == (0o700,
                                                                                      0o600)
    # Keys of their own: a token of one means nothing to the other, their ids alike.
    token = first.session().get_token()
    assert validates(first, token) == 200
    assert validates(second, token) == 404



def test_a_placement_from_the_template_serves_its_database(tmp_path, cache, started):
    needs(PLACEMENT_VENV, "Placement")
    servers = [start(started, PlacementServer.create(tmp_path / name))
               for name in ("first", "second")]
    template = placement_module.template().directory
    assert template is not None and (template / MANIFEST).exists()
    for server in servers:
        # Through the database: a provider made and read back.
        body = {"name": f"host-of-{server.run_dir.name}"}
        headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest"}
        made = requests.post(server.endpoint + "/resource_providers", json=body,
                             headers=headers, timeout=30)
        assert made.status_code == 200, made.text
        listed = requests.get(server.endpoint + "/resource_providers", headers=headers,
                              timeout=30).json()["resource_providers"]
        assert [p["name"] for p in listed] == [body["name"]]


@pytest.mark.parametrize("damage", ["a file changed", "no manifest"])
def test_a_damaged_placement_template_is_not_used_and_made_again(tmp_path, cache, started,
                                                                damage):
    needs(PLACEMENT_VENV, "Placement")
    start(started, PlacementServer.create(tmp_path / "first"))
    template = placement_module.template().directory
    assert template is not None
    if damage == "a file changed":
        # An empty file is an empty SQLite database: Placement would answer "/" on it.
        (template / "placement.sqlite").write_bytes(b"")
    else:
        (template / MANIFEST).unlink()
    server = start(started, PlacementServer.create(tmp_path / "second"))
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest"}
    answer = requests.get(server.endpoint + "/resource_providers", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    manifest = json.loads((template / MANIFEST).read_text())["files"]
    assert (template / "placement.sqlite").stat().st_size > 0
    assert set(manifest) == {"placement.sqlite"}


def test_a_placement_whose_template_cannot_be_made_runs_db_sync(tmp_path, monkeypatch,
                                                                started):
    needs(PLACEMENT_VENV, "Placement")
    not_a_directory = tmp_path / "cache"
    not_a_directory.write_text("")
    monkeypatch.setenv("ETCD_COMPUTE_CACHE", str(not_a_directory))
    server = start(started, PlacementServer.create(tmp_path / "placement"))
    headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest"}
    answer = requests.get(server.endpoint + "/resource_providers", headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text


# The template helper alone, with builds of plain files.

def test_a_build_that_fails_leaves_no_template_and_copies_nothing(tmp_path, cache):
    def fails(directory: Path) -> None:
        (directory / "half").write_text("made")
        raise RuntimeError("the manage command failed")

    into = tmp_path / "run" / "half"
    assert not Template("test", tmp_path, "r").copy(fails, {"half": into})
    assert not into.exists()
    assert list(cache.iterdir()) == []  # nor a partial one


def test_a_template_is_built_once_then_copied(tmp_path, cache):
    builds: list[Path] = []

    def build(directory: Path) -> None:
        builds.append(directory)
        (directory / "state").write_text("prepared")

    template = Template("test", tmp_path, "r")
    for run in ("a", "b"):
        assert template.copy(build, {"state": tmp_path / run / "state"})
        assert (tmp_path / run / "state").read_text() == "prepared"
    assert len(builds) == 1
    # Another recipe is another template.
    assert Template("test", tmp_path, "other").directory != template.directory
    # Tampered with: built again; a leftover of a build cut short is removed meanwhile.
    directory = template.directory
    assert directory is not None
    leftover = cache / f".{directory.name}-cut-short"
    leftover.mkdir()
    (directory / "state").write_text("tampered")
    assert template.copy(build, {"state": tmp_path / "c" / "state"})
    assert (tmp_path / "c" / "state").read_text() == "prepared"
    assert len(builds) == 2 and not leftover.exists()
