"""When each fake guest ran, on which host: from the fake drivers' guests.log files."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from etcd_compute.drivers.fake import FakeDriver


def timeline(configs: list[dict[str, Any]]) -> list[tuple[float, str, str, str]]:
    """(time, uuid, event "run"|"halt", host) from every host's guests.log, in time order."""
    events = []
    for config in configs:
        path = Path(config["compute"]["state_dir"]) / "fake-instances" / "guests.log"
        if path.exists():
            for line in path.read_text().splitlines():
                uuid, event, host, at = line.split()
                events.append((float(at), uuid, event, host))
    return sorted(events)


def run_intervals(events: list[tuple[float, str, str, str]]
                  ) -> dict[str, list[tuple[str, float, float]]]:
    """{uuid: [(host, from, to)]}: a run with no halt after it runs until now (infinity)."""
    started: dict[tuple[str, str], float] = {}
    intervals: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
    for at, uuid, event, host in events:
        if event == "run":
            started.setdefault((uuid, host), at)
        elif (uuid, host) in started:
            intervals[uuid].append((host, started.pop((uuid, host)), at))
    for (uuid, host), since in started.items():
        intervals[uuid].append((host, since, math.inf))
    return intervals


def overlaps(configs: list[dict[str, Any]]) -> list[str]:
    """Every instance that ran on two hosts at overlapping times (should be none)."""
    found = []
    for uuid, spans in run_intervals(timeline(configs)).items():
        for i, (host_a, start_a, end_a) in enumerate(spans):
            for host_b, start_b, end_b in spans[i + 1:]:
                if host_a != host_b and start_a < end_b and start_b < end_a:
                    found.append(f"{uuid}: on {host_a} {start_a:.3f}-{end_a:.3f} and on "
                                 f"{host_b} {start_b:.3f}-{end_b:.3f}")
    return found


def power_loss(config: dict[str, Any]) -> list[str]:
    """The machine of a host killed with SIGKILL lost power too: its guests stop now.
    (A killed compute daemon alone would leave libvirt's guests running; a dead host
    does not.)"""
    return FakeDriver(config).fence()
