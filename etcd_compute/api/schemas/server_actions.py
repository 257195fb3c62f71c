"""Server actions' bodies, per microversion (Nova's `schemas/servers.py` and
`schemas/console_output.py`)."""

from __future__ import annotations

import copy
from typing import Any

from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import parameter_types as types


def _bare(name: str) -> dict[str, Any]:
    """An action with no parameters: any value (Nova's, until a microversion restricts it)."""
    return {"type": "object", "properties": {name: {}}, "required": [name],
            "additionalProperties": False}


start = _bare("os-start")
stop = _bare("os-stop")
suspend = _bare("suspend")
resume = _bare("resume")
pause = _bare("pause")
unpause = _bare("unpause")
confirm_resize = _bare("confirmResize")
revert_resize = _bare("revertResize")

reboot = {
    "type": "object",
    "properties": {"reboot": {
        "type": "object",
        "properties": {"type": {"type": "string",
                                "enum": ["HARD", "Hard", "hard", "SOFT", "Soft", "soft"]}},
        "required": ["type"],
        "additionalProperties": False,
    }},
    "required": ["reboot"],
    "additionalProperties": False,
}

resize = {
    "type": "object",
    "properties": {"resize": {
        "type": "object",
        "properties": {"flavorRef": types.flavor_ref, "OS-DCF:diskConfig": types.disk_config},
        "required": ["flavorRef"],
        "additionalProperties": False,
    }},
    "required": ["resize"],
    "additionalProperties": False,
}

_rebuild = {
    "type": "object",
    "properties": {"rebuild": {
        "type": "object",
        "properties": {
            "name": types.name,
            "imageRef": {"type": "string", "maxLength": 2048},
            "adminPass": types.admin_password,
            "metadata": types.metadata,
            "preserve_ephemeral": types.boolean,
            "OS-DCF:diskConfig": types.disk_config,
            "accessIPv4": types.accessIPv4,
            "accessIPv6": types.accessIPv6,
            "personality": types.personality,
        },
        "required": ["imageRef"],
        "additionalProperties": False,
    }},
    "required": ["rebuild"],
    "additionalProperties": False,
}

create_image = {
    "type": "object",
    "properties": {"createImage": {
        "type": "object",
        "properties": {"name": types.name, "metadata": types.metadata},
        "required": ["name"],
        "additionalProperties": False,
    }},
    "required": ["createImage"],
    "additionalProperties": False,
}

console_output = {
    "type": "object",
    "properties": {"os-getConsoleOutput": {
        "type": "object",
        "properties": {"length": {"type": ["integer", "string", "null"],
                                  "pattern": "^-?[0-9]+$", "minimum": -1}},
        "additionalProperties": False,
    }},
    "required": ["os-getConsoleOutput"],
    "additionalProperties": False,
}


def rebuild_schema(version: Version) -> dict[str, Any]:
    """2.19 description, 2.54 key_name, 2.57 user_data (personality gone), 2.63
    trusted_image_certificates (refused when given: we verify no image signatures)."""
    schema = copy.deepcopy(_rebuild)
    properties = schema["properties"]["rebuild"]["properties"]
    if version.at_least("2.19"):
        properties["description"] = types.description
    if version.at_least("2.54"):
        properties["key_name"] = {"type": ["string", "null"], "format": "name",
                                  "minLength": 1, "maxLength": 255}
    if version.at_least("2.57"):
        properties.pop("personality")
        properties["user_data"] = {"type": ["string", "null"], "format": "base64",
                                   "maxLength": 65535}
    if version.at_least("2.63"):
        properties["trusted_image_certificates"] = {
            "type": ["array", "null"], "minItems": 1, "maxItems": 50, "uniqueItems": True,
            "items": {"type": "string", "minLength": 1}}
    return schema


def migrate_live_schema(version: Version) -> dict[str, Any]:
    """Nova's `migrate_server.migrate_live`: block_migration, disk_over_commit and host
    required; 2.25 drops disk_over_commit and lets block_migration be "auto"; force from
    2.30 until 2.68 removes it."""
    host = {**types.fqdn, "type": ["string", "null"]}
    block_migration: dict[str, Any] = copy.deepcopy(types.boolean)
    properties: dict[str, Any] = {"block_migration": block_migration, "host": host}
    required = ["block_migration", "host"]
    if version.at_least("2.25"):
        block_migration["enum"].append("auto")
    else:
        properties["disk_over_commit"] = types.boolean
        required.append("disk_over_commit")
    if version.at_least("2.30") and not version.at_least("2.68"):
        properties["force"] = types.boolean
    return {"type": "object",
            "properties": {"os-migrateLive": {"type": "object", "properties": properties,
                                              "required": required,
                                              "additionalProperties": False}},
            "required": ["os-migrateLive"], "additionalProperties": False}


def migrate_schema(version: Version) -> dict[str, Any]:
    """Nova's `migrate_server.migrate`: any value until 2.56, then null or an object with
    an optional host."""
    if not version.at_least("2.56"):
        return _bare("migrate")
    host = {**types.fqdn, "type": ["string", "null"]}
    return {"type": "object",
            "properties": {"migrate": {"type": ["object", "null"],
                                       "properties": {"host": host},
                                       "additionalProperties": False}},
            "required": ["migrate"], "additionalProperties": False}



def _security_group(name: str) -> dict[str, Any]:
    """addSecurityGroup, removeSecurityGroup: a group's name (Nova's schemas; other keys
    beside the action are the dispatcher's 400)."""
    return {
        "type": "object",
        "properties": {name: {
            "type": "object",
            "properties": {"name": {"type": "string", "minLength": 1}},
            "required": ["name"],
            "additionalProperties": False,
        }},
        "required": [name],
        "additionalProperties": True,
    }


add_security_group = _security_group("addSecurityGroup")
remove_security_group = _security_group("removeSecurityGroup")
