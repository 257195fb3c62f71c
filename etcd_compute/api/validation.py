"""Request bodies and query strings checked against JSON Schema, with Nova's messages.

Nova validates with JSON Schema draft 4 and its own formats (`name`: printable, no
leading or trailing whitespace; `uuid`; `base64`; `ipv4`/`ipv6`; `regex`); a refusal is
400 "Invalid input for field/attribute <name>. Value: <value>. <reason>". Query strings
are validated as {name: [values]} (every parameter may repeat), as Nova's are.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
import unicodedata
import uuid as uuidlib
from typing import Any

import jsonschema

from etcd_compute.api.wsgi import bad_request

FORMATS = jsonschema.FormatChecker(formats=())


def _printable(char: str) -> bool:
    """Nova's: letters, marks, numbers, punctuation, symbols and plain spaces."""
    category = unicodedata.category(char)
    return not category.startswith("C") and (not category.startswith("Z") or category == "Zs")


def _no_space(char: str) -> bool:
    return _printable(char) and unicodedata.category(char) != "Zs"


@FORMATS.checks("name")
def _name(instance: object) -> bool:
    """Printable, not starting or ending with whitespace (Nova's `valid_name_regex`)."""
    if not isinstance(instance, str):
        return True
    if not all(_printable(c) for c in instance):
        return False
    return not instance or (_no_space(instance[0]) and _no_space(instance[-1]))


@FORMATS.checks("name_with_leading_trailing_spaces")
def _name_with_spaces(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    return all(_printable(c) for c in instance) and any(_no_space(c) for c in instance)


@FORMATS.checks("printable")
def _printable_text(instance: object) -> bool:
    """Nova's `valid_description_regex`: printable characters only."""
    return not isinstance(instance, str) or all(_printable(c) for c in instance)


@FORMATS.checks("uuid")
def _uuid(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        uuidlib.UUID(instance)
    except ValueError:
        return False
    return True


_BASE64 = re.compile(r"\A[A-Za-z0-9+/=\s]*\Z")


@FORMATS.checks("base64")
def _base64(instance: object) -> bool:
    """Base64 (Nova's check, and no characters outside the alphabet, which Nova would
    skip: what we keep is what was sent)."""
    if not isinstance(instance, str):
        return True
    if not _BASE64.match(instance):
        return False
    try:
        base64.decodebytes(instance.encode("utf-8"))
    except (binascii.Error, UnicodeEncodeError):
        return False
    return True


@FORMATS.checks("ipv4")
def _ipv4(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        ipaddress.IPv4Address(instance)
    except ValueError:
        return False
    return True


@FORMATS.checks("ipv6")
def _ipv6(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        ipaddress.IPv6Address(instance)
    except ValueError:
        return False
    return True


@FORMATS.checks("regex")
def _regex(instance: object) -> bool:
    if not isinstance(instance, str):
        return True
    try:
        re.compile(instance)
    except (re.error, RecursionError, OverflowError):
        return False
    return True


# Validators by schema (our schemas are module constants, never changed).
_VALIDATORS: dict[int, tuple[dict[str, Any], jsonschema.Draft4Validator]] = {}


def _validator(schema: dict[str, Any]) -> jsonschema.Draft4Validator:
    known = _VALIDATORS.get(id(schema))
    if known is None or known[0] is not schema:
        known = _VALIDATORS[id(schema)] = (
            schema, jsonschema.Draft4Validator(schema, format_checker=FORMATS))
    return known[1]


def _check(schema: dict[str, Any], instance: Any, what: str) -> None:
    validator = _validator(schema)
    # The first error, as Nova's `validate` raises it.
    error = next(iter(validator.iter_errors(instance)), None)
    if error is None:
        return
    message = _short(error.message)
    if error.path:
        if what == "body":
            field = error.path[-1]
            raise bad_request(f"Invalid input for field/attribute {field}. Value: "
                              f"{_short(repr_value(error.instance))}. {message}")
        field = error.path[0]
        raise bad_request(f"Invalid input for query parameters {field}. Value: "
                          f"{_short(repr_value(error.instance))}. {message}")
    raise bad_request(message)


def body(schema: dict[str, Any], instance: Any) -> None:
    """400 with Nova's message unless `instance` (a request body) matches `schema`."""
    _check(schema, instance, "body")


def query(schema: dict[str, Any], params: dict[str, list[str]]) -> None:
    """400 unless the query string ({name: [values]}) matches `schema`."""
    _check(schema, params, "query")


def repr_value(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)


def _short(text: str, limit: int = 300) -> str:
    """One printable line: an echoed value never carries control characters or pages."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def single(params: dict[str, list[str]], name: str) -> str | None:
    """The last value of a query parameter (Nova takes the last of repeated ones)."""
    values = params.get(name)
    return values[-1] if values else None


@FORMATS.checks("date-time")
def _date_time(instance: object) -> bool:
    return not isinstance(instance, str) or parse_time(instance) is not None


def parse_time(text: str) -> float | None:
    """An ISO 8601 time as a POSIX timestamp (no zone: UTC, as Nova's); None if malformed."""
    import datetime

    try:
        when = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return when.timestamp()
