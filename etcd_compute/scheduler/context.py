"""What filters and weighers see besides the host: the request's group and limits."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class PlanContext:
    policy: str | None = None
    # Members of the request's group per host: existing ones plus those planned so far.
    group_hosts: Counter[str] = field(default_factory=Counter)
    max_instances_per_host: int = 50
    # An anti-affinity group's members per host at most (its max_server_per_host).
    group_max: int = 1
    now: float = field(default_factory=time.time)
