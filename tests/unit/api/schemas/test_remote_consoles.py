"""Remote consoles' schemas (Nova's): the old actions' types, remote-consoles' protocols and
types by microversion (mks/webmks from 2.8), the removed RDP action taking anything."""

from __future__ import annotations

import pytest

from etcd_compute.api import validation
from etcd_compute.api.microversion import Version
from etcd_compute.api.schemas import remote_consoles
from etcd_compute.api.wsgi import Fault


def body(protocol: str, console_type: str) -> dict:
    return {"remote_console": {"protocol": protocol, "type": console_type}}


@pytest.mark.parametrize(("version", "protocol", "console_type", "ok"), [
    ("2.6", "vnc", "novnc", True), ("2.6", "rdp", "rdp-html5", True),
    ("2.6", "mks", "webmks", False), ("2.8", "mks", "webmks", True),
    ("2.8", "vnc", "spice-direct", False), ("2.6", "telnet", "novnc", False),
])
def test_remote_consoles_by_microversion(version, protocol, console_type, ok):
    schema = remote_consoles.create_schema(Version.parse(version))
    if ok:
        validation.body(schema, body(protocol, console_type))
    else:
        with pytest.raises(Fault):
            validation.body(schema, body(protocol, console_type))


@pytest.mark.parametrize(("schema", "value", "ok"), [
    (remote_consoles.get_vnc_console, {"os-getVNCConsole": {"type": "novnc"}}, True),
    (remote_consoles.get_vnc_console, {"os-getVNCConsole": {"type": "xvpvnc"}}, True),
    (remote_consoles.get_vnc_console, {"os-getVNCConsole": {}}, False),
    (remote_consoles.get_vnc_console, {"os-getVNCConsole": {"type": "novnc", "x": 1}}, False),
    (remote_consoles.get_spice_console, {"os-getSPICEConsole": {"type": "spice-html5"}}, True),
    (remote_consoles.get_serial_console, {"os-getSerialConsole": {"type": "novnc"}}, False),
    (remote_consoles.get_rdp_console, {"os-getRDPConsole": "anything"}, True),
])
def test_the_old_actions(schema, value, ok):
    if ok:
        validation.body(schema, value)
    else:
        with pytest.raises(Fault):
            validation.body(schema, value)
