"""Microversions as Nova negotiates them: none is the minimum, latest the maximum, a
malformed one 400, one out of range 406; the answer's headers."""

from __future__ import annotations

import pytest

from etcd_compute.api import microversion
from etcd_compute.api.microversion import MAX, MIN, Version, VersionError


def test_no_header_is_the_minimum_and_latest_the_maximum():
    assert microversion.requested({}) == MIN == Version(2, 1)
    assert microversion.requested({"OpenStack-API-Version": "compute latest"}) == MAX
    assert microversion.requested({"X-OpenStack-Nova-API-Version": "2.2"}) == Version(2, 2)


def test_the_standard_header_wins_and_other_services_are_ignored():
    headers = {"OpenStack-API-Version": "compute 2.3, placement 1.39",
               "X-OpenStack-Nova-API-Version": "2.2"}
    assert microversion.requested(headers) == Version(2, 3)
    assert microversion.requested({"OpenStack-API-Version": "placement 1.39"}) == MIN


@pytest.mark.parametrize("asked", ["3.0", "2.0", "1.1", f"2.{MAX.minor + 1}", "2.1000"])
def test_out_of_range_is_406_with_novas_message(asked):
    with pytest.raises(VersionError) as caught:
        microversion.requested({"OpenStack-API-Version": f"compute {asked}"})
    assert caught.value.status == 406
    assert str(caught.value) == (f"Version {Version.parse(asked)} is not supported by the "
                                 f"API. Minimum is 2.1 and maximum is {MAX}.")
    assert caught.value.version == Version.parse(asked)


@pytest.mark.parametrize("asked", ["two", "2", "2.01", "02.1", "2.1.1", "-2.1", "2.x"])
def test_a_malformed_version_is_400(asked):
    with pytest.raises(VersionError) as caught:
        microversion.requested({"OpenStack-API-Version": f"compute {asked}"})
    assert caught.value.status == 400 and "is of invalid format" in str(caught.value)


def test_versions_compare_as_numbers_and_headers_name_the_version():
    assert Version(2, 10) > Version(2, 9) and Version(2, 10).at_least("2.9")
    assert not Version(2, 9).at_least("2.10")
    assert microversion.response_headers(Version(2, 47)) == [
        ("OpenStack-API-Version", "compute 2.47"), ("X-OpenStack-Nova-API-Version", "2.47"),
        ("Vary", "OpenStack-API-Version"), ("Vary", "X-OpenStack-Nova-API-Version")]
