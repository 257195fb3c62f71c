"""Prepared service state ("templates"): a service's files as its manage commands leave
them (`keystone-manage db_sync` and `bootstrap`, `placement-manage db sync`,
`glance-manage db_sync`), made once and then copied into each new run directory. Each of
those commands spends ~1-2 s of CPU importing its service; the test suite starts dozens.

A template is keyed by its service's virtualenv (resolved path and every installed
distribution's name and version) and by its recipe (the config and commands that made it),
so a stale one is never used: another Keystone, another config, another template. It lives
under `$ETCD_COMPUTE_CACHE/templates` (default ~/.cache/etcd-compute, as tools/install.sh's
virtualenvs; `ETCD_COMPUTE_CACHE=` (empty): no templates, the manage commands every start),
shared by the xdist workers, the runs and `make up`. It is built under a machine-wide lock
into a temporary directory, renamed into place whole, and holds a manifest of its files'
SHA-256 digests, checked on every copy: a damaged template is built again, and whatever
fails leaves the caller to run its manage commands itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from etcd_compute.errors import ServiceUnavailable
from tools.local_services.process import host_lock

LOG = logging.getLogger(__name__)
MANIFEST = "manifest.json"
SQLITE = "sqlite:///"


class DamagedTemplate(Exception):
    """A template's file does not match its manifest (or the manifest is missing)."""


def cache_dir(name: str) -> Path | None:
    """`name` under the machine's cache (tools/install.sh's CACHE: `$ETCD_COMPUTE_CACHE`,
    default ~/.cache/etcd-compute); None: an empty ETCD_COMPUTE_CACHE turns caching off."""
    configured = os.environ.get("ETCD_COMPUTE_CACHE")
    if configured is not None:
        return Path(configured) / name if configured else None
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "etcd-compute" / name


def cache_root() -> Path | None:
    """Where templates live; None: templates are off."""
    return cache_dir("templates")


def venv_identity(venv: Path) -> list[str]:
    """A virtualenv's resolved path and its installed distributions (`*.dist-info` names
    carry the versions): a reinstall in place with other versions is another identity."""
    resolved = venv.resolve()
    installed = sorted(p.name for p in resolved.glob("lib/python*/site-packages/*.dist-info"))
    return [str(resolved), *installed]


def _digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


@dataclass(frozen=True)
class Template:
    """The prepared files of `kind` made by `recipe` with the service in `venv`."""

    kind: str
    venv: Path
    recipe: str

    @property
    def key(self) -> str:
        identity = json.dumps([self.kind, venv_identity(self.venv), self.recipe])
        return hashlib.sha256(identity.encode()).hexdigest()[:16]

    @property
    def directory(self) -> Path | None:
        root = cache_root()
        return root / f"{self.kind}-{self.key}" if root else None

    def ensure(self, build: Callable[[Path], None]) -> Path | None:
        """The template's directory, built first by `build(directory)` when it has none:
        for a template used where it is (read-only, never written by its users), not
        copied. None: templates are off."""
        directory = self.directory
        if directory is None:
            return None
        if not (directory / MANIFEST).exists():
            with host_lock(f"template-{self.kind}", timeout=900):
                if not (directory / MANIFEST).exists():  # another built it meanwhile
                    self._build(directory, build)
        return directory

    def copy(self, build: Callable[[Path], None], files: dict[str, Path]) -> bool:
        """Copy the template's `files` (its file name: where to), the template built first
        by `build(directory)` (which leaves those files there) when there is none or it is
        damaged. False: no template (off, or its build or copy failed; nothing copied): the
        caller runs its manage commands itself."""
        directory = self.directory
        if directory is None:
            return False
        try:
            with contextlib.suppress(DamagedTemplate):
                self._copy(directory, files)
                return True
            with host_lock(f"template-{self.kind}", timeout=600):
                with contextlib.suppress(DamagedTemplate):  # another built it meanwhile
                    self._copy(directory, files)
                    return True
                self._build(directory, build)
                self._copy(directory, files)
                return True
        except Exception as exc:  # whatever it was, the manage commands still work
            LOG.warning("%s template %s not used (%s: %s); running the manage commands",
                        self.kind, directory, type(exc).__name__, exc)
            return False

    def copy_sqlite(self, build: Callable[[Path], None], db_url: str, name: str) -> bool:
        """A new SQLite database at `db_url` copied from the template's file `name` (False:
        not SQLite, already there, or no template: the caller syncs it)."""
        if not db_url.startswith(SQLITE):
            return False
        database = Path(db_url.removeprefix(SQLITE))
        return not database.exists() and self.copy(build, {name: database})

    @staticmethod
    def _copy(directory: Path, files: dict[str, Path]) -> None:
        """Copy `files` checked against the manifest, all or none (DamagedTemplate)."""
        try:
            manifest = json.loads((directory / MANIFEST).read_text())["files"]
        except (OSError, ValueError, KeyError) as exc:
            raise DamagedTemplate(f"no readable manifest in {directory}") from exc
        made: list[Path] = []  # removed again unless all are copied
        try:
            for name, target in files.items():
                if name not in manifest:
                    raise DamagedTemplate(f"{name} not in {directory}")
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f".{target.name}.partial")
                made.append(partial)
                # Made 0600, then given the template file's mode: a secret is never open.
                fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as copy, open(directory / name, "rb") as source:
                    shutil.copyfileobj(source, copy)
                shutil.copymode(directory / name, partial)
                if _digest(partial) != manifest[name]:
                    raise DamagedTemplate(f"{directory / name} differs from its manifest")
                os.replace(partial, target)
                made[-1] = target
        except BaseException:
            for path in made:
                path.unlink(missing_ok=True)
            raise

    def _build(self, directory: Path, build: Callable[[Path], None]) -> None:
        """Under the lock: remove a damaged template and builds cut short, build in a
        temporary directory, then rename it into place whole."""
        root = directory.parent
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        for leftover in root.glob(f".{directory.name}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
        if directory.exists():
            # Renamed away first: a reader sees the whole template or none.
            doomed = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=root))
            os.replace(directory, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        building = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=root))
        try:
            build(building)
            files = {p.name: _digest(p) for p in sorted(building.iterdir()) if p.is_file()}
            (building / MANIFEST).write_text(json.dumps(
                {"kind": self.kind, "venv": str(self.venv.resolve()), "files": files},
                indent=1))
            os.rename(building, directory)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        LOG.info("built the %s template %s", self.kind, directory)


@dataclass(frozen=True)
class SyncedDatabase:
    """A service's database as its manage command's sync leaves it (Placement's, Glance's):
    the config section naming it, the sync, and a new SQLite one copied from a template."""

    kind: str
    venv: Path
    section: str  # of the service's config file
    sync_command: tuple[str, ...]  # the manage command (in the venv's bin) and its arguments
    file_name: str  # the SQLite file in the template
    # More manage commands run after the sync, each as `sync_command` is (Glance's metadata
    # definitions loaded, as its install guide and devstack do).
    then: tuple[tuple[str, ...], ...] = ()

    def config(self, db_url: str) -> str:
        return f"[{self.section}]\nconnection = {db_url}\n"

    def sync(self, conf: Path) -> None:
        for command in (self.sync_command, *self.then):
            manage, *args = command
            done = subprocess.run([str(self.venv / "bin" / manage), "--config-file",
                                   str(conf), *args], capture_output=True, text=True,
                                  check=False)
            if done.returncode:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
                raise ServiceUnavailable(f"{' '.join(command)} failed: {lines[-1][:200]}")

    def template(self) -> Template:
        recipe = json.dumps([self.config(f"{SQLITE}/run-dir/{self.file_name}"),
                             list(self.sync_command[1:]),
                             *(list(command[1:]) for command in self.then)])
        return Template(self.kind, self.venv, recipe)

    def _build(self, directory: Path) -> None:
        """The SQLite file as the sync leaves it (only the database section of the config
        takes part)."""
        with tempfile.TemporaryDirectory(prefix=f"{self.kind}-template-") as scratch:
            conf = Path(scratch) / f"{self.kind}.conf"
            conf.write_text(self.config(f"{SQLITE}{directory / self.file_name}"))
            self.sync(conf)

    def prepare(self, conf: Path, db_url: str) -> None:
        """The database `conf` names (`db_url`) ready: a new SQLite one copied from the
        template, any other synced."""
        if not self.template().copy_sqlite(self._build, db_url, self.file_name):
            self.sync(conf)
