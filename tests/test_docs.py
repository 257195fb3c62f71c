"""The documentation cannot drift from the code: the generated reference pages fail `make
docs` when a default, a key or a command's option changes, a key without a meaning fails
it, a dead link in README.md fails it, and the strict MkDocs build fails on a broken link
or anchor or a page left out of the navigation (tools/docs_reference.py, tools/docs_links.py,
mkdocs.yml)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from etcd_compute import defaults
from etcd_compute.cli import schedule as schedule_cli
from tests.support import REPO, unavailable
from tools import docs_links, docs_reference

MKDOCS = REPO / ".venv-docs" / "bin" / "mkdocs"


def test_the_generated_pages_are_up_to_date_with_the_code() -> None:
    assert docs_reference.stale(docs_reference.pages()) == []


def test_a_changed_default_makes_the_configuration_page_stale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    compute = dict(defaults.COMPUTE_DEFAULTS["compute"], heartbeat_ttl=11)
    monkeypatch.setitem(defaults.COMPUTE_DEFAULTS, "compute", compute)
    page = docs_reference.configuration_page()
    assert "| `compute.heartbeat_ttl` | integer (>= 2) | `11` |" in page
    assert docs_reference.stale({docs_reference.CONFIG_PAGE: page}) == [
        "docs/reference/configuration.md is out of date with the code: run "
        "`.venv/bin/python -m tools.docs_reference`"]


def test_a_key_without_a_description_fails_the_build(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = docs_reference.load_schema("compute_config")
    compute = dict(schema["properties"]["compute"])
    compute["properties"] = dict(compute["properties"], brand_new={"type": "integer"})
    real = docs_reference.load_schema
    changed = dict(schema, properties=dict(schema["properties"], compute=compute))
    monkeypatch.setattr(docs_reference, "load_schema",
                        lambda name: changed if name == "compute_config" else real(name))
    with pytest.raises(docs_reference.MissingDescription, match="compute.yaml "
                       "compute.brand_new"):
        docs_reference.configuration_page()
    assert docs_reference.main(["--check"]) == 1


def test_a_new_option_makes_the_command_line_page_stale(
        monkeypatch: pytest.MonkeyPatch) -> None:
    build = schedule_cli.build_parser

    def with_an_option():
        parser, every = build()
        every["stop"].add_argument("--gently", action="store_true", help="brand new")
        return parser, every

    monkeypatch.setattr(schedule_cli, "build_parser", with_an_option)
    page = docs_reference.cli_page()
    assert "--gently" in page and "brand new" in page
    assert docs_reference.stale({docs_reference.CLI_PAGE: page}) != []


def test_dead_links_outside_docs_are_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           ) -> None:
    monkeypatch.setattr(docs_links, "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# A page\n\n## `make up` (local)\n")
    readme = tmp_path / "README.md"
    readme.write_text(
        "[ok](docs/page.md) [ok](docs/page.md#make-up-local) [site](https://example.org/x)\n"
        "[gone](docs/gone.md) [bad anchor](docs/page.md#nope)\n"
        "```\n[in a code block](docs/not-a-link.md)\n```\n")
    assert docs_links.dead_links(readme) == [
        "README.md: link 'docs/gone.md': no such file",
        "README.md: link 'docs/page.md#nope': no heading with that anchor"]
    assert docs_links.main(["README.md"]) == 1


def test_readme_links_lead_somewhere() -> None:
    assert docs_links.dead_links(REPO / "README.md") == []


def _mkdocs(site: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    if not MKDOCS.exists():
        unavailable("MkDocs (.venv-docs): run make install")
    return subprocess.run([str(MKDOCS), "build", "--strict", "-d", str(site)],
                          cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def _copy_of_the_docs(tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copy(REPO / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copytree(REPO / "docs", copy / "docs")
    return copy


def test_the_strict_build_passes_and_fails_on_rot(tmp_path: Path) -> None:
    copy = _copy_of_the_docs(tmp_path)
    built = _mkdocs(tmp_path / "site", copy)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "reference" / "configuration.html").exists()

    for rot, warning in (
            ("[x](reference/nope.md)", "'reference/nope.md', but the target is not found"),
            ("[x](tutorial.md#no-such-heading)", "does not contain an anchor "
                                                 "'#no-such-heading'")):
        (copy / "docs" / "index.md").write_text(
            (REPO / "docs" / "index.md").read_text() + f"\n{rot}\n")
        broken = _mkdocs(tmp_path / "site", copy)
        assert broken.returncode == 1 and warning in broken.stderr, broken.stderr
    (copy / "docs" / "index.md").write_text((REPO / "docs" / "index.md").read_text())
    (copy / "docs" / "orphan.md").write_text("# Left out of nav\n")
    broken = _mkdocs(tmp_path / "site", copy)
    assert broken.returncode == 1 and "orphan.md" in broken.stderr, broken.stderr
