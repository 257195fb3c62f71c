"""Local etcd, Placement, Keystone, Glance, PostgreSQL and libvirtd for the demo, `make up`
and the tests (and Prometheus, for the tests).

Each service is a plain child process with its data under a run directory,
started on the ports it is given (random free ones in tests) and stopped by
pid. Nothing here is needed in production, where etcd and Placement are
real deployments (an etcd cluster; Placement on PostgreSQL or MySQL).

    python -m tools.local_services up [--run-dir run]
    python -m tools.local_services down [--run-dir run]
    python -m tools.local_services status [--run-dir run]
"""

from tools.local_services import cloud
from tools.local_services.etcd import EtcdServer
from tools.local_services.glance import GlanceServer
from tools.local_services.keystone import KeystoneServer
from tools.local_services.libvirt import ensure_libvirtd, libvirtd_usable
from tools.local_services.placement import PlacementServer, PostgresServer
from tools.local_services.process import (
    CLIENTS_VENV,
    GLANCE_VENV,
    KEYSTONE_VENV,
    PLACEMENT_VENV,
    REPO,
    Service,
    free_port,
    host_lock,
    pid_alive,
    port_open,
    stop_pid,
    stop_pids,
    wait_until,
)
from tools.local_services.prometheus import PrometheusServer
from tools.local_services.stack import LocalStack

__all__ = ["CLIENTS_VENV", "GLANCE_VENV", "KEYSTONE_VENV", "PLACEMENT_VENV", "REPO",
           "EtcdServer", "GlanceServer", "KeystoneServer", "LocalStack", "PlacementServer",
           "PostgresServer", "PrometheusServer", "Service", "cloud", "ensure_libvirtd",
           "free_port", "host_lock", "libvirtd_usable", "pid_alive", "port_open", "stop_pid",
           "stop_pids", "wait_until"]
