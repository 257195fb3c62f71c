"""`compute.py --check`: is the config valid and is everything reachable?"""

from __future__ import annotations

from typing import Any

from etcd_compute.drivers import load_driver
from etcd_compute.errors import ServiceUnavailable
from etcd_compute.etcd import Store
from etcd_compute.placement import PlacementClient


def check(config: dict[str, Any]) -> list[str]:
    """One line per service that answered; raises on the first that does not."""
    lines = ["config: ok"]
    store = Store(config["etcd"])
    try:
        with store.errors():
            status = store.client.status()
        lines.append(f"etcd: ok (version {status.version}, {', '.join(store.endpoints)})")
    finally:
        store.close()
    lines.append(f"placement: ok ({PlacementClient(config['placement']).check()})")
    driver = load_driver(config)
    try:
        lines.append(f"driver: ok ({driver.check()})")
    except ServiceUnavailable:
        raise
    finally:
        driver.close()
    return lines
