"""A compute that loses etcd while it starts waits it out, as it does once running: real
etcd (TLS, RBAC), stopped just after the daemon registered in Placement, started again.

A compute used to leave `run` with the first "unreachable" of its start (exit 3): without a
supervisor the host stayed down. The etcd here is this module's own (it is stopped and
started; the session's is shared with other tests). The compute reaches it through a
proxy that holds each request a moment, so that etcd is gone before the first request
after registration arrives, however fast the daemon goes on. Which step of the start then
waits is the unit tests' business (tests/unit/compute/test_service.py): every one does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from etcd_compute.config import deep_merge
from etcd_compute.etcd import Store
from etcd_compute.pki import Pki
from tests.compute.helpers import claim_and_send, make_spec, wait_state
from tests.conftest import secured_etcd
from tests.support import wait_for
from tools.local_services import EtcdServer
from tools.local_services.proxy import CuttableProxy

# How long each chunk to etcd is held: the test stops etcd within it once it sees the
# daemon registered (it polls the log every 0.05 s).
HELD = 0.5
OUTAGE = 4.0


@pytest.fixture
def etcd_server(tmp_path_factory: pytest.TempPathFactory, cluster_pki: Pki
                ) -> Iterator[EtcdServer]:
    """This test's own etcd (it stops and starts it), in place of the session's."""
    with secured_etcd(tmp_path_factory.mktemp("own-etcd"), cluster_pki) as server:
        yield server


@pytest.fixture
def proxy(etcd_server: EtcdServer) -> Iterator[CuttableProxy]:
    proxy = CuttableProxy("127.0.0.1", etcd_server.port).start()
    yield proxy
    proxy.stop()


def test_etcd_stopped_after_registration_is_waited_out_and_the_host_then_serves(
        etcd_server, proxy, start_compute, compute_config, etcd_config, placement):
    config = deep_merge(compute_config, {"etcd": {"endpoints": [proxy.endpoint]}})
    rp = config["compute"]["uuid"]
    proxy.request_delay = HELD
    compute = start_compute(config)
    wait_for(lambda: "registered 1 provider(s) in Placement" in compute.log()
             or not compute.alive(), 60, what="the compute to register")
    proxy.cut()  # what it sends now is lost with the path
    etcd_server.stop()
    proxy.request_delay, stopped = 0.0, time.monotonic()
    assert "compute ready" not in compute.log(), "etcd was stopped too late"
    time.sleep(OUTAGE)
    assert compute.alive(), compute.log()[-3000:]
    etcd_server.start()
    proxy.restore()
    wait_for(lambda: "compute ready" in compute.log(), 60, what="the start to go on")
    print(f"ready {time.monotonic() - stopped:.1f} s after etcd was stopped "
          f"({OUTAGE:g} s away)")
    assert "retrying in 1 s" in compute.log()  # the start waited, step by step
    with Store(etcd_config) as store:  # a fresh client: the daemon's recovery is the point
        wait_for(lambda: store.get(store.keys.alive(rp)), 30, what="the heartbeat")
        spec = make_spec(rp)
        claim_and_send(store, placement, spec)
        wait_state(store, spec["uuid"], "ACTIVE")
    assert compute.alive() and "Traceback" not in compute.log()
