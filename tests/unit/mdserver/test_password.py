"""mdserver/password.py: a guest's password POST, kept once, whole, and answered once the
compute published it. The attacks first: too long, not text, a second POST, two at once."""

from __future__ import annotations

import threading
import uuid as uuidlib
from pathlib import Path

import pytest

from etcd_compute.mdserver import password
from etcd_compute.mdserver.password import MAX_SIZE, PasswordRefused, accept, current
from etcd_compute.virt.instance_files import InstanceFiles


@pytest.fixture
def files(tmp_path: Path) -> InstanceFiles:
    found = InstanceFiles.of(tmp_path, str(uuidlib.uuid4()))
    found.create()
    return found


def left(files: InstanceFiles) -> list[str]:
    return sorted(path.name for path in files.directory.iterdir())


@pytest.mark.parametrize("body", [b"x" * (MAX_SIZE + 1), b"\xff\xfe" * 10, b"ok\xc3"])
def test_a_password_too_long_or_not_text_is_400_and_nothing_kept(files, body):
    with pytest.raises(PasswordRefused) as refused:
        accept(files, body, wait=0)
    assert refused.value.status == "400 Bad Request"
    assert left(files) == [] and current(files) == ""


def test_a_second_post_is_409_and_the_first_password_stays(files):
    assert accept(files, b"first", wait=0) is False  # kept, nobody published it
    with pytest.raises(PasswordRefused) as refused:
        accept(files, b"second", wait=0)
    assert (refused.value.status, str(refused.value)) == ("409 Conflict",
                                                          "a password is set already")
    assert current(files) == "first" and left(files) == ["password"]


def test_of_two_posts_at_once_one_is_kept_whole(files):
    outcomes: list[str] = []

    def post(text: bytes) -> None:
        try:
            accept(files, text, wait=0)
            outcomes.append("kept")
        except PasswordRefused as refused:
            outcomes.append(refused.status)

    threads = [threading.Thread(target=post, args=(bytes([65 + n]) * MAX_SIZE,))
               for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["409 Conflict"] * 7 + ["kept"]
    kept = current(files)
    assert len(kept) == MAX_SIZE and len(set(kept)) == 1 and left(files) == ["password"]


def test_the_post_is_answered_once_the_compute_published_it(files):
    waited: list[float] = []

    def sleep(seconds: float) -> None:
        waited.append(seconds)
        if len(waited) == 3:  # the compute publishes meanwhile
            files.mark_password_published(files.read_password() or "")

    assert accept(files, "pässword".encode(), wait=10, sleep=sleep) is True
    assert waited == [password.PUBLISH_POLL_SECONDS] * 3
    assert current(files) == "pässword"


def test_a_mark_of_another_password_is_not_this_ones(files):
    files.mark_password_published("an older one")
    clock = iter(range(100))
    assert accept(files, b"new", wait=3, sleep=lambda _s: None,
                  now=lambda: next(clock)) is False


def test_an_empty_post_is_no_password_and_keeps_nothing(files):
    assert accept(files, b"", wait=0) is True and left(files) == []
    accept(files, b"set", wait=0)
    with pytest.raises(PasswordRefused) as refused:
        accept(files, b"", wait=0)
    assert refused.value.status == "409 Conflict" and current(files) == "set"


def test_once_cleared_the_guest_may_post_again(files):
    accept(files, b"one", wait=0)
    files.mark_password_published("one")
    files.clear_password()
    assert left(files) == [] and current(files) == ""
    assert accept(files, b"two", wait=0) is False and current(files) == "two"
