"""The network tests' fixtures: per module, a Neutron stack on the session's Keystone and the
`openstack` command line's shells; the fixtures of guests on Neutron ports (guests.py) and
of the compute API over them (compute_cloud.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from etcd_compute.pki import Pki
from tests.network.compute_cloud import compute_cloud  # noqa: F401 (the API's, for the package)
from tests.network.guests import (  # noqa: F401 (the guests' fixtures, for the package)
    guest_image,
    hosts,
    neutron,
    neutron_settings,
    prober,
    tenant,
    workers,
)
from tests.network.neutron import OPENSTACK, Cli, network_stack
from tests.openstack_shell import OpenStackShells
from tests.support import running
from tools.local_services import KeystoneServer, cloud
from tools.local_services.networking import NetworkStack


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, keystone_server: KeystoneServer,
            cluster_pki: Pki) -> Iterator[NetworkStack]:
    with running(network_stack(tmp_path_factory.mktemp("network"), keystone_server,
                               cluster_pki)) as stack:
        yield stack


@pytest.fixture(scope="module")
def openstack(tmp_path_factory: pytest.TempPathFactory, keystone_server: KeystoneServer,
              network: NetworkStack) -> Iterator[Cli]:
    clouds = cloud.write_clouds_yaml(keystone_server,
                                     tmp_path_factory.mktemp("clouds") / "clouds.yaml")
    shells = OpenStackShells(OPENSTACK.parent / "python",
                             {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})
    try:
        yield Cli(shells)
    finally:
        shells.close()
