"""qemu_img.py: how qemu-img is run: always with `-f`, under rlimits and a parent-death
signal, private files, one-line errors, and qemu-img's second opinion on an image. A
stand-in `qemu-img` on PATH records its arguments and limits (the real one runs in
tests/virt)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from etcd_compute.errors import BuildError, RequestError
from etcd_compute.virt import qemu_img

FAKE_QEMU_IMG = r"""#!/bin/sh
{ printf '%s\n' "$@"
  echo "limits as=$(ulimit -v) cpu=$(ulimit -t) umask=$(umask) arenas=$MALLOC_ARENA_MAX"
} > "$FAKE_QEMU_IMG_LOG"
case "$FAKE_QEMU_IMG_MODE" in
  fail) echo "qemu-img: warning: something first" >&2
        echo "qemu-img: Could not open 'x': No such file or directory" >&2; exit 1 ;;
  silent) exit 7 ;;
  killed) kill -9 $$ ;;
  *) echo '{"format": "qcow2", "virtual-size": 1048576}' ;;
esac
"""


class FakeQemuImg:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        script = bin_dir / "qemu-img"
        script.write_text(FAKE_QEMU_IMG)
        script.chmod(0o755)
        self.log = tmp_path / "qemu-img.log"
        self.monkeypatch = monkeypatch
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_QEMU_IMG_LOG", str(self.log))

    def mode(self, mode: str) -> None:
        self.monkeypatch.setenv("FAKE_QEMU_IMG_MODE", mode)

    def args(self) -> list[str]:
        return self.log.read_text().splitlines()[:-1]

    def limits(self) -> str:
        return self.log.read_text().splitlines()[-1]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeQemuImg:
    return FakeQemuImg(tmp_path, monkeypatch)


def test_the_command_dies_with_its_parent_and_runs_under_limits():
    command = qemu_img.limited(["qemu-img", "info"], 30)
    assert command[:4] == ["setpriv", "--pdeathsig", "KILL", "--"]
    assert f"--as={qemu_img.ADDRESS_SPACE_BYTES}" in command and "--cpu=30" in command
    assert command[-2:] == ["qemu-img", "info"]


def test_info_reads_the_image_as_the_named_format_under_the_limits(fake):
    assert qemu_img.info(Path("/images/a"), "raw") == {"format": "qcow2",
                                                       "virtual-size": 1048576}
    assert fake.args() == ["info", "--output=json", "-f", "raw", "/images/a"]
    # 1 GiB of address space (in KiB), Nova's 30 s of CPU, files private to us.
    assert fake.limits() == "limits as=1048576 cpu=30 umask=0077 arenas=1"


@pytest.mark.parametrize("image_format", ["vmdk", "qed", "", "qcow2 -f raw"])
def test_no_format_but_raw_and_qcow2_is_given_to_qemu_img(fake, image_format):
    for call in (lambda: qemu_img.info(Path("x"), image_format),
                 lambda: qemu_img.convert(Path("x"), image_format, Path("y")),
                 lambda: qemu_img.create_overlay(Path("x"), image_format, Path("y"), 1)):
        with pytest.raises(ValueError, match="not one we run qemu-img on"):
            call()
    assert not fake.log.exists()


def test_a_conversion_names_both_formats_and_gets_more_cpu_time(fake):
    qemu_img.convert(Path("/c/a.download"), "raw", Path("/c/a.converting"))
    assert fake.args() == ["convert", "-q", "-f", "raw", "-O", "qcow2", "/c/a.download",
                           "/c/a.converting"]
    assert f"cpu={qemu_img.CONVERT_CPU_SECONDS} " in fake.limits()


def test_an_overlay_names_its_backing_format_and_its_size(fake):
    qemu_img.create_overlay(Path("/c/base.qcow2"), "qcow2", Path("/i/disk.qcow2"), 5 * 1024**3)
    assert fake.args() == ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", "/c/base.qcow2",
                           "/i/disk.qcow2", str(5 * 1024**3)]


def test_an_overlay_is_pointed_at_another_copy_of_its_base_without_reading_either(fake):
    qemu_img.rebase_unsafe(Path("/i/disk.qcow2"), Path("/c/base.qcow2"), "qcow2")
    assert fake.args() == ["rebase", "-q", "-u", "-f", "qcow2", "-F", "qcow2", "-b",
                           "/c/base.qcow2", "/i/disk.qcow2"]
    with pytest.raises(ValueError):
        qemu_img.rebase_unsafe(Path("x"), Path("y"), "vmdk")


@pytest.mark.parametrize(("mode", "reason"), [
    ("fail", "qemu-img info: qemu-img: Could not open 'x': No such file or directory"),
    ("silent", "qemu-img info: exit status 7"),
    ("killed", "qemu-img info: killed by signal 9 (resource limit)"),
])
def test_a_failure_is_one_line_naming_the_subcommand(fake, mode, reason):
    fake.mode(mode)
    with pytest.raises(BuildError) as caught:
        qemu_img.info(Path("x"), "qcow2")
    assert str(caught.value) == reason and type(caught.value) is BuildError


# -- the second opinion ------------------------------------------------------------------


def details(**overrides: object) -> dict[str, object]:
    return {"format": "qcow2", "virtual-size": 1024**3, "format-specific": {"data": {}},
            **overrides}


@pytest.mark.parametrize(("answer", "fault"), [
    (details(format="raw"), "image u: qemu-img reads it as 'raw', not qcow2"),
    (details(**{"backing-filename": "/etc/shadow"}),
     "image u: images with a backing file are refused"),
    (details(**{"format-specific": {"data": {"data-file": "/dev/sda"}}}),
     "image u: qcow2 images with an external data file are refused"),
])
def test_qemu_img_disagreeing_with_the_inspector_is_the_requests_fault(monkeypatch, answer,
                                                                        fault):
    monkeypatch.setattr(qemu_img, "info", lambda _path, _format: answer)
    with pytest.raises(RequestError) as caught:
        qemu_img.check_standalone(Path("x"), "qcow2", "image u")
    assert str(caught.value) == fault


def test_a_standalone_image_passes_with_its_details(monkeypatch):
    asked = []
    monkeypatch.setattr(qemu_img, "info", lambda path, fmt: asked.append((path, fmt)) or
                        details(**{"format-specific": None}))
    assert qemu_img.check_standalone(Path("x"), "qcow2", "image u")["virtual-size"] == 1024**3
    assert asked == [(Path("x"), "qcow2")]
