"""The pool seen from the daemon: why a job failed, in one line, and when the pool broke."""

from __future__ import annotations

import concurrent.futures
import concurrent.futures.process

import pebble
import pytest

from etcd_compute.compute.pool import BUILD, DESTROY, Job, job_error, pool_broke
from etcd_compute.errors import BuildError, ServiceUnavailable

UUID = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


def job_ending(outcome: object = None, *, kind: str = BUILD, cancel: bool = False) -> Job:
    """A job whose future ended with `outcome` (an exception, or a result)."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    if cancel:
        assert future.cancel()
    else:
        future.set_running_or_notify_cancel()
        if isinstance(outcome, BaseException):
            future.set_exception(outcome)
        else:
            future.set_result(outcome)
    return Job(kind, UUID, {"uuid": UUID}, future)


def test_a_successful_job_has_no_error():
    assert job_error(job_ending({"ip": "10.0.0.5"}), 30) is None
    assert job_error(job_ending(None), 30) is None


def test_a_cancelled_job_says_so():
    assert job_error(job_ending(cancel=True), 30) == "cancelled"


@pytest.mark.parametrize(("kind", "timeout", "text"),
                         [(BUILD, 900, "build timed out after 900 s (worker killed)"),
                          (DESTROY, 2.5, "destroy timed out after 2.5 s (worker killed)")])
def test_a_timed_out_job_names_its_kind_and_the_limit(kind, timeout, text):
    assert job_error(job_ending(concurrent.futures.TimeoutError(), kind=kind), timeout) == text


def test_a_job_whose_worker_died_gives_the_exit_code():
    died = pebble.ProcessExpired("Abnormal termination", code=-9, pid=1234)
    assert job_error(job_ending(died), 30) == "build worker died (exit code -9)"


@pytest.mark.parametrize("exc", [BuildError("image http://x/y: 404 Not Found"),
                                 ServiceUnavailable("libvirt qemu:///system: no connection")])
def test_our_own_errors_are_reported_as_they_are(exc):
    assert job_error(job_ending(exc), 30) == str(exc)


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (KeyError("uuid"), "KeyError: 'uuid'"),
        (ValueError("first line\nsecond line\nthird"), "ValueError: first line"),
        (RuntimeError(), "RuntimeError"),
        (OSError(28, "No space left on device"), "OSError: [Errno 28] No space left on device"),
    ],
)
def test_any_other_exception_is_one_line_with_its_class(exc, text):
    reason = job_error(job_ending(exc), 30)
    assert reason == text and "\n" not in reason


def test_a_broken_pool_is_told_apart_from_a_failed_job():
    broken = concurrent.futures.process.BrokenProcessPool("a worker died")
    assert pool_broke(job_ending(broken).future)
    assert not pool_broke(job_ending(BuildError("no")).future)
    assert not pool_broke(job_ending({"ip": None}).future)
    assert not pool_broke(job_ending(cancel=True).future)


def test_a_job_remembers_when_it_started_and_defaults_to_blaming_the_host():
    job = job_ending(None)
    assert job.blame_host and job.attempt == 1 and not job.destroy_requested
    assert job.started > 0 and job.record_revision == 0
