"""Microversions, as Nova negotiates them.

A client asks with `OpenStack-API-Version: compute X.Y` (or the legacy
`X-OpenStack-Nova-API-Version: X.Y`); none means the minimum, `latest` the
maximum. A malformed version is 400; one outside [MIN, MAX] is 406 with Nova's
message. Every answer under /v2.1 names the version it was made at in both
headers, and `Vary`s on them.

MAX is the highest version whose every step we implement as Nova does for the
resources we serve (see docs/reference/compute-api.md for the steps and what they
change here).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import microversion_parse

HEADER = "OpenStack-API-Version"
LEGACY_HEADER = "X-OpenStack-Nova-API-Version"
SERVICE_TYPE = "compute"
_FORMAT = re.compile(r"\A([1-9]\d*)\.([1-9]\d*|0)\Z")


class VersionError(Exception):
    """A version a client asked for that we cannot serve: `status` 400 or 406."""

    def __init__(self, status: int, message: str, version: Version | None = None):
        super().__init__(message)
        self.status = status
        # The version asked for when it was well-formed (Nova names it in its answer).
        self.version = version


@dataclass(frozen=True, order=True)
class Version:
    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _FORMAT.match(text.strip())
        if not match:
            raise VersionError(400, f"API Version String {text[:40]} is of invalid format. "
                                    "Must be of format MajorNum.MinorNum.")
        return cls(int(match.group(1)), int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    def at_least(self, text: str) -> bool:
        """True from microversion `text` on (Nova's `is_supported`)."""
        return self >= Version.parse(text)


MIN = Version(2, 1)
MAX = Version(2, 85)


def requested(headers: Mapping[str, str]) -> Version:
    """The version a request asks for; VersionError (400 or 406) when we cannot serve it."""
    asked = microversion_parse.get_version(headers, service_type=SERVICE_TYPE,
                                           legacy_headers=[LEGACY_HEADER])
    if asked is None:
        return MIN
    if asked.strip().lower() == "latest":
        return MAX
    version = Version.parse(asked)
    if not MIN <= version <= MAX:
        raise VersionError(406, f"Version {version} is not supported by the API. Minimum is "
                                f"{MIN} and maximum is {MAX}.", version)
    return version


def response_headers(version: Version) -> list[tuple[str, str]]:
    """The headers an answer at `version` carries (Nova's)."""
    return [(HEADER, f"{SERVICE_TYPE} {version}"), (LEGACY_HEADER, str(version)),
            ("Vary", HEADER), ("Vary", LEGACY_HEADER)]
