"""Nova's parameter types (`nova/api/validation/parameter_types.py`), the ones we use."""

from __future__ import annotations

from typing import Any


def multi_params(schema: dict[str, Any]) -> dict[str, Any]:
    """A query parameter that may repeat (Nova validates the list of its values)."""
    return {"type": "array", "items": schema}


def single_param(schema: dict[str, Any]) -> dict[str, Any]:
    return {**multi_params(schema), "maxItems": 1}


common_query_param = multi_params({"type": "string"})
common_query_regex_param = multi_params({"type": "string", "format": "regex"})

boolean = {
    "type": ["boolean", "string"],
    "enum": [True, "True", "TRUE", "true", "1", "ON", "On", "on", "YES", "Yes", "yes",
             False, "False", "FALSE", "false", "0", "OFF", "Off", "off", "NO", "No", "no"],
}
TRUE_STRINGS = ("true", "1", "on", "yes", "y", "t")

positive_integer = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 1,
                    "minLength": 1}
non_negative_integer = {"type": ["integer", "string"], "pattern": "^[0-9]*$", "minimum": 0,
                        "minLength": 1}
name = {"type": "string", "format": "name", "minLength": 1, "maxLength": 255}
name_with_leading_trailing_spaces = {"type": "string",
                                     "format": "name_with_leading_trailing_spaces",
                                     "minLength": 1, "maxLength": 255}
description = {"type": ["string", "null"], "format": "printable", "minLength": 0,
               "maxLength": 255}
hostname = {"type": "string", "pattern": "^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$",
            "minLength": 2, "maxLength": 63}
fqdn = {"type": "string", "pattern": "^[a-zA-Z0-9-._]*$", "minLength": 1, "maxLength": 255}
flavor_ref = {"type": ["string", "integer"], "minLength": 1}
metadata = {
    "type": "object",
    "patternProperties": {"^[a-zA-Z0-9-_:. ]{1,255}$": {"type": "string", "maxLength": 255,
                                                      "format": "printable"}},
    "additionalProperties": False,
}
ip_address = {"type": "string", "oneOf": [{"format": "ipv4"}, {"format": "ipv6"}]}
accessIPv4 = {"type": "string", "format": "ipv4"}
accessIPv6 = {"type": "string", "format": "ipv6"}
disk_config = {"type": "string", "enum": ["AUTO", "MANUAL"]}
admin_password = {"type": "string"}
volume_size = {"type": ["integer", "string"], "pattern": "^[0-9]+$", "minimum": 1,
               "maximum": 0x7FFFFFFF}
flavor_param_positive = dict(volume_size)
flavor_param_non_negative = {**volume_size, "minimum": 0}
personality = {
    "type": "array",
    "items": {"type": "object",
              "properties": {"path": {"type": "string"},
                             "contents": {"type": "string", "format": "base64"}},
              "additionalProperties": False},
}
# Nova's instance tags: at most 50, each 1-60 characters without ',' or '/'.
MAX_TAG_COUNT = 50
tag = {"type": "string", "pattern": "^[^,/]*$", "minLength": 1, "maxLength": 60,
       "format": "printable"}
pagination_parameters = {
    "limit": multi_params(non_negative_integer),
    "marker": multi_params({"type": "string"}),
}
keypair_name_special_chars = {"allOf": [name, {"type": "string",
                                               "pattern": r"^[_\- a-zA-Z0-9]+$",
                                               "minLength": 1, "maxLength": 255}]}
keypair_name_special_chars_v292 = {"allOf": [name, {"type": "string",
                                                    "pattern": r"^[_\-\@\. a-zA-Z0-9]+$",
                                                    "minLength": 1, "maxLength": 255}]}


def is_true(value: Any) -> bool:
    """Nova's strutils.bool_from_string for what `boolean` admits."""
    return value is True or (isinstance(value, str) and value.strip().lower() in TRUE_STRINGS)
