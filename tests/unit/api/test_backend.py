"""A backend wires the objects over one store and Placement client."""

from __future__ import annotations

from etcd_compute.api.backend import Backend
from tests.unit.api.harness import api_config
from tests.unit.fakes import FakePlacement, FakeStore


def test_a_backend_shares_its_clients_and_reads_the_api_section():
    store, placement = FakeStore(), FakePlacement()
    backend = Backend.over(api_config(max_limit=7), store, placement)
    assert backend.settings["max_limit"] == 7
    assert backend.flavors.store is store and backend.quotas.placement is placement
    assert backend.builds.servers is backend.servers
    backend.close()
