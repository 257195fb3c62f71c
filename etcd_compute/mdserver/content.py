"""What a guest sees: EC2-style and OpenStack-style paths rendered from its meta.json (and,
put in by the server for the paths that show them, `local_ipv4` and `public_ipv4`:
addresses.py). Its password (openstack/<version>/password) is the server's: password.py."""

from __future__ import annotations

import json
import re
from typing import Any

VERSION = r"(latest|\d{4}-\d{2}-\d{2})"


def render(path: str, meta: dict[str, Any]) -> tuple[str, bytes] | None:
    """(content type, body) for `path` of the instance described by `meta`, or None."""
    text = "text/plain; charset=utf-8"
    user_data = meta.get("user_data")
    ssh_key = meta.get("ssh_key")
    ec2 = re.fullmatch(VERSION + r"(/.*)?", path.lstrip("/"))
    openstack = re.fullmatch(r"openstack/" + VERSION + r"(/.*)?", path.lstrip("/"))

    def plain(body: str) -> tuple[str, bytes]:
        return text, body.encode()

    if path in ("", "/"):
        return plain("latest\n")
    if ec2:
        rest = (ec2.group(2) or "/").rstrip("/") or "/"
        if rest == "/":
            return plain("meta-data/\n" + ("user-data\n" if user_data is not None else ""))
        if rest == "/user-data":
            return plain(user_data) if user_data is not None else None
        entries = {
            "/meta-data/instance-id": meta["uuid"],
            "/meta-data/hostname": meta["hostname"],
            "/meta-data/local-hostname": meta["hostname"],
            # Nova's: the fixed address and the floating IP, "" when there is none.
            "/meta-data/local-ipv4": meta.get("local_ipv4") or "",
            "/meta-data/public-ipv4": meta.get("public_ipv4") or "",
        }
        if rest in entries:
            return plain(entries[rest])
        if rest == "/meta-data":
            index = ["instance-id", "hostname", "local-hostname", "local-ipv4", "public-ipv4"]
            return plain("\n".join(index + (["public-keys/"] if ssh_key else [])) + "\n")
        if ssh_key:
            keys = {
                "/meta-data/public-keys": "0=key\n",
                "/meta-data/public-keys/0": "openssh-key\n",
                "/meta-data/public-keys/0/openssh-key": ssh_key.strip() + "\n",
            }
            if rest in keys:
                return plain(keys[rest])
        return None
    if path.rstrip("/") == "/openstack":
        return plain("latest\n")
    if openstack:
        rest = (openstack.group(2) or "/").rstrip("/") or "/"
        if rest == "/":
            return plain("meta_data.json\npassword\n"
                         + ("user_data\n" if user_data is not None else ""))
        if rest == "/meta_data.json":
            document = {
                "uuid": meta["uuid"],
                "name": meta["name"],
                "hostname": meta["hostname"],
                "launch_index": 0,
                "public_keys": {"key": ssh_key.strip()} if ssh_key else {},
                "meta": {},
            }
            return "application/json", json.dumps(document).encode()
        if rest == "/user_data":
            return plain(user_data) if user_data is not None else None
    return None
