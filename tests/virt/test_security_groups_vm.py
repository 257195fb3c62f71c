"""A real TCG guest taken out of the default security group and put back, on a hypervisor
host of its own (a network namespace with its own libvirtd and compute daemon): out of it,
its neighbour's pings to it go unanswered and its own DNS questions to the host go
unanswered (its traffic is dropped both ways but DHCP); back in, both answer again. The
swap is the compute's, asked as every action is (the request in the host's spec), done on
the running guest (libvirt's device update re-instantiates the NIC's filter), and kept in
its definition.

Each guest says on its console, every second, whether its host's DNS (dnsmasq on the
gateway) answered it, and the neighbour whether the other guest answered its ping."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from etcd_compute.instances import actions as action_txn
from etcd_compute.instances import records
from tests.compute.helpers import claim_and_send, make_spec, record, wait_state
from tests.support import wait_for
from tests.virt.hypervisors import RESOURCES, hypervisors
from tools.local_services.hypervisors import GUEST_CIDR, Hypervisors

pytestmark = [pytest.mark.vm, pytest.mark.timeout(600)]

PROBES = r"""#!/bin/sh
. /etc/guest-functions
while true; do
    if nslookup x.invalid GATEWAY 2>&1 | grep -q "server can't find"; then
        say "dns answered"
    else
        say "dns silent"
    fi
    if [ -n "PEER" ]; then
        if ping -c 1 -W 1 PEER >/dev/null 2>&1; then say "peer answered"
        else say "peer silent"; fi
    fi
    sleep 1
done
"""


@pytest.fixture
def hosts() -> Iterator[Hypervisors]:
    with hypervisors(["sg"]) as made:
        yield made


def said(console: str, what: str, after: int = 0) -> list[str]:
    """The guest's `what` lines (answered or silent) after the console's first `after`
    characters."""
    return re.findall(rf"ETCD-COMPUTE-GUEST {what} (answered|silent)", console[after:])


def settled(console: str, what: str, answer: str, after: int, times: int = 3) -> bool:
    """The last `times` of the guest's `what` lines since `after` are all `answer`."""
    found = said(console, what, after)
    return len(found) >= times and set(found[-times:]) == {answer}


def ask_groups(store, host: str, uuid: str, groups: list[str]) -> str:
    """The operator's request in the host's spec (as ops/lifecycle.py writes it); its id."""
    entry, spec = records.read_spec(store, host, uuid)
    request = action_txn.new_request("test@secgroups", security_groups=groups)
    assert action_txn.request_action(store, entry, spec, records.read_record(store, host, uuid),
                                     "security-groups", request) is not None
    return str(request["id"])


def test_a_guest_out_of_default_is_unreachable_and_reaches_nothing_until_it_is_back(
        hosts, computes, store, placement, test_guest_image):
    host = hosts["sg"]
    computes.start("sg")
    rp = computes.rp("sg")
    wait_for(lambda: store.get(store.keys.alive(rp)), 60, what="the host's heartbeat")
    gateway = GUEST_CIDR.rsplit(".", 1)[0] + ".1"

    def guest(peer: str) -> dict:
        spec = make_spec(rp, image=f"file://{test_guest_image}", resources=dict(RESOURCES),
                         allocations={rp: {"resources": RESOURCES}},
                         user_data=PROBES.replace("GATEWAY", gateway).replace("PEER", peer))
        claim_and_send(store, placement, spec)
        return spec

    target = guest("")
    a = target["uuid"]
    a_ip = wait_state(store, a, "ACTIVE", timeout=300)["ip"]
    b = guest(a_ip)["uuid"]
    wait_state(store, b, "ACTIVE", timeout=300)
    # Both in default: the neighbour's pings answered, the host's DNS answers the guest.
    wait_for(lambda: settled(host.console(b), "peer", "answered", 0), 180, interval=0.5,
             what="b's pings to a answered")
    wait_for(lambda: settled(host.console(a), "dns", "answered", 0), 120, interval=0.5,
             what="a's DNS answered")

    request = ask_groups(store, rp, a, [])
    done = wait_for(lambda: (r := record(store, a)) and r.get("request_id") == request and
                    r["state"] == "ACTIVE" and r, 120, what="the swap done")
    assert done["security_groups"] == [] and not done.get("error")
    since_a, since_b = len(host.console(a)), len(host.console(b))
    wait_for(lambda: settled(host.console(b), "peer", "silent", since_b), 60, interval=0.5,
             what="b's pings to a unanswered")
    wait_for(lambda: settled(host.console(a), "dns", "silent", since_a), 90, interval=0.5,
             what="a's DNS unanswered")
    # The running guest and its definition both carry the filter of no group; b's does not.
    connection = host.connection()
    try:
        for flags in (0, 2):  # live, then VIR_DOMAIN_XML_INACTIVE
            xml = connection.lookupByName(a).XMLDesc(flags)
            assert ET.fromstring(xml).find("devices/interface/filterref").get("filter") == \
                "etcd-compute-guest-isolated"
        assert ET.fromstring(connection.lookupByName(b).XMLDesc(0)).find(
            "devices/interface/filterref").get("filter") == "etcd-compute-guest"
    finally:
        connection.close()
    assert settled(host.console(b), "dns", "answered", since_b)  # b is still the network's

    request = ask_groups(store, rp, a, ["default"])
    wait_for(lambda: (r := record(store, a)) and r.get("request_id") == request and
             r["state"] == "ACTIVE" and r["security_groups"] == ["default"], 120,
             what="the swap back")
    since_a, since_b = len(host.console(a)), len(host.console(b))
    wait_for(lambda: settled(host.console(b), "peer", "answered", since_b), 60,
             interval=0.5, what="b's pings to a answered again")
    wait_for(lambda: settled(host.console(a), "dns", "answered", since_a), 90, interval=0.5,
             what="a's DNS answered again")
    assert records.read_spec(store, rp, a)[1]["security_groups"] == ["default"]
