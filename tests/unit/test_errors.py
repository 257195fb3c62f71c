"""errors.py: what the CLIs and the daemons rely on: every error is an EtcdComputeError with an
exit status (1 failed, 2 bad input, 3 a service unreachable), the families the retry paths
catch, and the build errors that cross the worker pool unchanged."""

from __future__ import annotations

import inspect
import pickle

import pytest

from etcd_compute import errors
from etcd_compute.errors import (
    BuildError,
    ConfigError,
    ConflictError,
    EtcdComputeError,
    EtcdUnavailable,
    GlanceError,
    GlanceUnavailable,
    InvalidMessage,
    NeutronError,
    NeutronUnavailable,
    NotFound,
    NoValidHost,
    PlacementError,
    PlacementUnavailable,
    RequestError,
    ServiceUnavailable,
    UsageError,
)

EXIT_STATUS = {
    EtcdComputeError: 1, NoValidHost: 1, NotFound: 1, InvalidMessage: 1, BuildError: 1,
    RequestError: 1, PlacementError: 1, ConflictError: 1, GlanceError: 1, NeutronError: 1,
    UsageError: 2, ConfigError: 2,
    ServiceUnavailable: 3, EtcdUnavailable: 3, PlacementUnavailable: 3, GlanceUnavailable: 3,
    NeutronUnavailable: 3,
}


def test_every_error_of_the_module_is_one_the_clis_catch_and_has_its_exit_status():
    defined = {cls for _, cls in inspect.getmembers(errors, inspect.isclass)
               if issubclass(cls, Exception) and cls.__module__ == errors.__name__}
    assert defined == set(EXIT_STATUS)  # a new error gets its status decided here
    for cls in defined:
        assert issubclass(cls, EtcdComputeError)


@pytest.mark.parametrize(("cls", "status"), sorted(EXIT_STATUS.items(), key=str))
def test_exit_status(cls, status):
    assert cls.exit_code == status


@pytest.mark.parametrize("cls", [EtcdUnavailable, PlacementUnavailable, GlanceUnavailable])
def test_an_unreachable_etcd_placement_or_glance_is_retried_as_any_unavailable_service(cls):
    assert issubclass(cls, ServiceUnavailable)


def test_a_placement_error_keeps_its_http_status_and_code():
    conflict = ConflictError("generation moved", 409, "placement.concurrent_update")
    assert isinstance(conflict, PlacementError)
    assert (str(conflict), conflict.status, conflict.code) == \
        ("generation moved", 409, "placement.concurrent_update")
    assert (PlacementError("x").status, PlacementError("x").code) == (None, None)


def test_no_valid_host_says_the_one_line_and_keeps_the_reasons():
    error = NoValidHost(["host-a: not enough VCPU", "host-b: disabled"])
    assert str(error) == "NO ALLOCATIONS LEFT"
    assert error.reasons == ["host-a: not enough VCPU", "host-b: disabled"]


@pytest.mark.parametrize("cls", [BuildError, RequestError])
def test_a_build_error_survives_the_worker_pool(cls):
    """Workers send a driver's exception back pickled: type and message arrive unchanged."""
    error = pickle.loads(pickle.dumps(cls("image x: HTTP 404")))
    assert type(error) is cls and isinstance(error, BuildError)
    assert str(error) == "image x: HTTP 404"
