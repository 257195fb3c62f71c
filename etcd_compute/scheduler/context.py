"""What filters and weighers see besides the host: the request's group, limits and image."""

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
    # The image's architecture and hypervisor_type, if it names them (ImagePropertiesFilter).
    image_properties: dict[str, str] = field(default_factory=dict)
    now: float = field(default_factory=time.time)
