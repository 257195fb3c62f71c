"""Servers: create, update and list, per microversion (Nova's `schemas/servers.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types

_hints = {
    "type": "object",
    "properties": {
        "group": {"oneOf": [{"type": "array", "items": {"type": "string", "format": "uuid"}},
                            {"type": "string", "format": "uuid"}]},
        "different_host": {"oneOf": [{"type": "string", "format": "uuid"},
                                     {"type": "array",
                                      "items": {"type": "string", "format": "uuid"}}]},
        "same_host": {"type": ["string", "array"],
                      "items": {"type": "string", "format": "uuid"}},
        "query": {"type": ["string", "object"]},
        "target_cell": types.name,
        "different_cell": {"type": ["string", "array"], "items": {"type": "string"}},
        "build_near_host_ip": types.ip_address,
        "cidr": {"type": "string", "pattern": "^/[0-9a-f.:]+$"},
    },
    "additionalProperties": True,
}

_bdm = {"type": "array", "items": {"type": "object"}}

create = {
    "type": "object",
    "properties": {
        "server": {
            "type": "object",
            "properties": {
                "name": types.name,
                # A Glance image id (once images are in Glance), or our URL images.
                "imageRef": {"type": "string", "maxLength": 2048},
                "flavorRef": types.flavor_ref,
                "adminPass": types.admin_password,
                "metadata": types.metadata,
                "networks": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"fixed_ip": types.ip_address,
                                       "port": {"type": ["string", "null"], "format": "uuid"},
                                       "uuid": {"type": "string"}},
                        "additionalProperties": False,
                    },
                },
                "OS-DCF:diskConfig": types.disk_config,
                "accessIPv4": types.accessIPv4,
                "accessIPv6": types.accessIPv6,
                "personality": types.personality,
                "availability_zone": types.name,
                "block_device_mapping": _bdm,
                "block_device_mapping_v2": _bdm,
                "config_drive": types.boolean,
                "key_name": types.name,
                "min_count": types.positive_integer,
                "max_count": types.positive_integer,
                "return_reservation_id": types.boolean,
                "security_groups": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"name": types.name},
                              "additionalProperties": False},
                },
                "user_data": {"type": "string", "format": "base64", "maxLength": 65535},
            },
            "required": ["name", "flavorRef"],
            "additionalProperties": False,
        },
        "os:scheduler_hints": _hints,
        "OS-SCH-HNT:scheduler_hints": _hints,
    },
    "required": ["server"],
    "additionalProperties": False,
}

_create_v219 = copy.deepcopy(create)
_create_v219["properties"]["server"]["properties"]["description"] = types.description

_create_v237 = copy.deepcopy(_create_v219)
_create_v237["properties"]["server"]["required"].append("networks")
_create_v237["properties"]["server"]["properties"]["networks"] = {
    "oneOf": [
        {"type": "array",
         "items": {"type": "object",
                   "properties": {"fixed_ip": types.ip_address,
                                  "port": {"type": ["string", "null"], "format": "uuid"},
                                  "uuid": {"type": "string", "format": "uuid"},
                                  "tag": types.tag},
                   "additionalProperties": False}},
        {"type": "string", "enum": ["none", "auto"]},
    ],
}

_create_v252 = copy.deepcopy(_create_v237)
_create_v252["properties"]["server"]["properties"]["tags"] = {
    "type": "array", "items": types.tag, "maxItems": types.MAX_TAG_COUNT}

_create_v257 = copy.deepcopy(_create_v252)
_create_v257["properties"]["server"]["properties"].pop("personality")

_create_v263 = copy.deepcopy(_create_v257)
_create_v263["properties"]["server"]["properties"]["trusted_image_certificates"] = {
    "type": ["array", "null"], "minItems": 1, "maxItems": 50, "uniqueItems": True,
    "items": {"type": "string", "minLength": 1}}

_create_v274 = copy.deepcopy(_create_v263)
_create_v274["properties"]["server"]["properties"]["host"] = types.fqdn
_create_v274["properties"]["server"]["properties"]["hypervisor_hostname"] = types.fqdn

update = {
    "type": "object",
    "properties": {
        "server": {
            "type": "object",
            "properties": {"name": types.name, "OS-DCF:diskConfig": types.disk_config,
                           "accessIPv4": types.accessIPv4, "accessIPv6": types.accessIPv6},
            "additionalProperties": False,
        },
    },
    "required": ["server"],
    "additionalProperties": False,
}

_update_v219 = copy.deepcopy(update)
_update_v219["properties"]["server"]["properties"]["description"] = types.description


def create_schema(version: Version) -> dict[str, Any]:
    for since, schema in (("2.74", _create_v274), ("2.63", _create_v263),
                          ("2.57", _create_v257), ("2.52", _create_v252),
                          ("2.37", _create_v237), ("2.19", _create_v219)):
        if version.at_least(since):
            return schema
    return create


def update_schema(version: Version) -> dict[str, Any]:
    return _update_v219 if version.at_least("2.19") else update


# --- listing --------------------------------------------------------------------------------

SORT_KEYS = ["access_ip_v4", "access_ip_v6", "auto_disk_config", "availability_zone",
             "config_drive", "created_at", "display_description", "display_name", "host",
             "hostname", "image_ref", "instance_type_id", "kernel_id", "key_name",
             "launch_index", "launched_at", "locked_by", "node", "power_state", "progress",
             "project_id", "ramdisk_id", "root_device_name", "task_state", "terminated_at",
             "updated_at", "user_id", "uuid", "vm_state"]
# Valid before 2.75 but ignored (Nova's SERVER_LIST_IGNORE_SORT_KEY).
IGNORED_SORT_KEYS = ["architecture", "cell_name", "cleaned", "default_ephemeral_device",
                     "default_swap_device", "deleted", "deleted_at", "disable_terminate",
                     "ephemeral_gb", "ephemeral_key_uuid", "id", "key_data", "launched_on",
                     "locked", "memory_mb", "os_type", "reservation_id", "root_gb",
                     "shutdown_terminate", "user_data", "vcpus", "vm_mode"]

_regex = types.common_query_regex_param
_plain = types.common_query_param
index_query = {
    "type": "object",
    "properties": {
        **{name: _plain for name in (
            "user_id", "project_id", "tenant_id", "launch_index", "image_ref", "image",
            "vm_state", "task_state", "host", "uuid", "sort_dir", "all_tenants",
            "soft_deleted", "deleted", "status", "block_device_mapping", "services",
            "metadata", "system_metadata", "info_cache", "security_groups", "pci_devices")},
        **{name: _regex for name in (
            "kernel_id", "ramdisk_id", "hostname", "key_name", "power_state", "node",
            "flavor", "reservation_id", "launched_at", "terminated_at", "availability_zone",
            "name", "display_name", "description", "display_description", "locked_by",
            "root_device_name", "config_drive", "access_ip_v4", "access_ip_v6",
            "auto_disk_config", "progress", "ip", "ip6", "created_at")},
        "sort_key": types.multi_params({"type": "string",
                                        "enum": SORT_KEYS + IGNORED_SORT_KEYS}),
        "changes-since": types.multi_params({"type": "string", "format": "date-time"}),
        **types.pagination_parameters,
    },
    "additionalProperties": True,
    "patternProperties": {"^_": _plain},
}

_index_v226 = copy.deepcopy(index_query)
_index_v226["properties"].update({name: _regex for name in
                                  ("tags", "tags-any", "not-tags", "not-tags-any")})

_index_v266 = copy.deepcopy(_index_v226)
_index_v266["properties"]["changes-before"] = types.multi_params(
    {"type": "string", "format": "date-time"})

_index_v273 = copy.deepcopy(_index_v266)
_index_v273["properties"]["sort_key"] = types.multi_params(
    {"type": "string", "enum": ["locked", *SORT_KEYS,
                                *(k for k in IGNORED_SORT_KEYS if k != "locked")]})
_index_v273["properties"]["locked"] = _plain

_index_v275 = copy.deepcopy(_index_v273)
_index_v275["properties"]["sort_key"] = types.multi_params(
    {"type": "string", "enum": ["locked", *SORT_KEYS]})
_index_v275["additionalProperties"] = False


def index_query_schema(version: Version) -> dict[str, Any]:
    for since, schema in (("2.75", _index_v275), ("2.73", _index_v273),
                          ("2.66", _index_v266), ("2.26", _index_v226)):
        if version.at_least(since):
            return schema
    return index_query


tags_update = {
    "type": "object",
    "properties": {"tags": {"type": "array", "items": types.tag,
                            "maxItems": types.MAX_TAG_COUNT}},
    "required": ["tags"],
    "additionalProperties": False,
}
