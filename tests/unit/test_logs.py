"""logs.py: one line per event with its instance (or "-"), one handler however often it is set
up, and libraries' chatter kept at WARNING."""

from __future__ import annotations

import io
import logging
import re

import pytest

from etcd_compute import logs

LINE = re.compile(r"\A\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+) (\S+) \[instance (\S+)\] (.*)\Z")


@pytest.fixture
def stream() -> io.StringIO:
    """Where setup() sends the log; the root logger and the libraries' levels put back after."""
    root = logging.getLogger()
    saved = (root.handlers[:], root.level,
             {name: logging.getLogger(name).level for name in ("urllib3", "pebble")})
    yield io.StringIO()
    root.handlers[:], level, noisy = saved
    root.setLevel(level)
    for name, noisy_level in noisy.items():
        logging.getLogger(name).setLevel(noisy_level)


def lines(stream: io.StringIO) -> list[tuple[str, ...]]:
    found = []
    for line in stream.getvalue().splitlines():
        match = LINE.match(line)
        assert match, line
        found.append(match.groups())
    return found


def test_each_event_is_one_line_with_its_instance_or_a_dash(stream):
    logs.setup("INFO", stream)
    log = logging.getLogger("etcd_compute.compute")
    log.info("build started", extra={"instance": "3f0c"})
    log.warning("heartbeat late")
    assert lines(stream) == [("INFO", "etcd_compute.compute", "3f0c", "build started"),
                             ("WARNING", "etcd_compute.compute", "-", "heartbeat late")]


def test_the_level_is_kept_and_a_second_setup_replaces_the_first(stream):
    earlier = io.StringIO()
    logs.setup("DEBUG", earlier)
    logs.setup("WARNING", stream)
    log = logging.getLogger("etcd_compute.scheduler")
    log.info("not at WARNING")
    log.error("once")
    assert earlier.getvalue() == ""
    assert [line[3] for line in lines(stream)] == ["once"]
    assert len(logging.getLogger().handlers) == 1


@pytest.mark.parametrize(("level", "libraries"), [
    ("DEBUG", logging.WARNING), ("INFO", logging.WARNING), ("ERROR", logging.ERROR)])
def test_libraries_report_warnings_at_most_never_below_our_level(stream, level, libraries):
    logs.setup(level, stream)
    assert logging.getLogger("urllib3").level == logging.getLogger("pebble").level == libraries
    logging.getLogger("urllib3.connectionpool").info("Starting new HTTP connection")
    assert stream.getvalue() == ""
