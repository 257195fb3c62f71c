"""The compute API on the neutron backend, against a real Neutron (ML2/OVN, MariaDB, OVN
central: tests/network) on the session's Keystone, driven with openstacksdk and the
`openstack` command line as Nova's clients drive Nova.

A create naming what its project may not use (another project's network or port, a port
in use, a fixed IP outside the network) is refused before anything is claimed, in Nova's
words; one that passes carries its networks and security groups to its host in the
instance spec. The fake-driver host makes the server's port in Neutron as any host of the
neutron backend does (compute/ports.py, with the service credential: device_id = the
server, bound to the host, in the groups the API checked) and deletes it with the server;
the API shows it as Nova does: the server's addresses, /ips, os-security-groups, and
security groups added to and removed from its ports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from etcd_compute import messages
from etcd_compute.pki import Pki
from tests.api.conftest import IMAGE, Cloud
from tests.network.neutron import OPENSTACK, network_stack
from tests.openstack_shell import OpenStackShells
from tests.support import REPO, running, unavailable, wait_for
from tools.local_services import KeystoneServer
from tools.local_services import cloud as local_cloud
from tools.local_services.networking import NetworkStack


def cloud_config(keystone: KeystoneServer, pki: Pki) -> dict[str, Any]:
    """The API (and its host) on the neutron backend, with the service credential: the host
    makes its servers' ports. The fake driver plugs no port anywhere (no Open vSwitch, no
    OVN chassis of the host's name), so no port of it goes ACTIVE and Neutron sends no
    network-vif-plugged: `vif_plugging_timeout: 0` (Nova's option: do not wait) lets its
    builds end ACTIVE without waiting for either. A fake driver that plugs OVS internal
    ports on a per-host switch will make them go up."""
    return {"network": {"backend": "neutron", "neutron": {
        "keystone": local_cloud.service_credentials(keystone), "ca_cert": str(pki.ca_cert),
        "vif_plugging_timeout": 0}}}


@pytest.fixture(scope="module")
def network(tmp_path_factory: pytest.TempPathFactory, keystone: KeystoneServer,
            cluster_pki: Pki) -> Iterator[NetworkStack]:
    with running(network_stack(tmp_path_factory.mktemp("network"), keystone,
                               cluster_pki)) as stack:
        yield stack


@pytest.fixture(scope="module")
def neutron(network: NetworkStack, cloud: Cloud) -> Iterator[dict[str, Any]]:
    """demo's network (10.20.0.0/24) and security group web (ssh in), alt's network: made
    with openstacksdk, deleted after the module."""
    demo, alt = cloud.connect("demo"), cloud.connect("alt")
    made: dict[str, Any] = {}
    try:
        made["net"] = demo.network.create_network(name="demo-net")
        demo.network.create_subnet(network_id=made["net"].id, ip_version=4,
                                   cidr="10.20.0.0/24", name="demo-subnet")
        made["web"] = demo.network.create_security_group(name="web", description="ssh")
        demo.network.create_security_group_rule(
            security_group_id=made["web"].id, direction="ingress", protocol="tcp",
            port_range_min=22, port_range_max=22, remote_ip_prefix="192.0.2.0/24")
        made["theirs"] = alt.network.create_network(name="alt-net")
        alt.network.create_subnet(network_id=made["theirs"].id, ip_version=4,
                                  cidr="10.30.0.0/24")
        yield made
    finally:
        admin = cloud.connect("admin")
        for name in ("net", "theirs"):  # what a failed test left
            for port in admin.network.ports(network_id=made[name].id) if name in made else []:
                if not port.device_owner.startswith("network:"):  # Neutron's own go along
                    admin.network.delete_port(port)
        if "web" in made:
            demo.network.delete_security_group(made["web"])
        for conn, name in ((demo, "net"), (alt, "theirs")):
            if name in made:
                conn.network.delete_network(made[name])


def refused(cloud: Cloud, networks: list[dict[str, str]]) -> Any:
    """The exception openstacksdk raises for demo's create on `networks`."""
    import openstack.exceptions

    demo = cloud.connect("demo")
    with pytest.raises(openstack.exceptions.HttpException) as caught:
        demo.compute.create_server(name="refused", flavor_id="1", image_id=IMAGE,
                                   networks=networks)
    return caught.value


def test_what_the_project_may_not_use_is_refused_before_any_claim(
        network: NetworkStack, cloud: Cloud, neutron: dict[str, Any]) -> None:
    demo, alt = cloud.connect("demo"), cloud.connect("alt")
    theirs = neutron["theirs"].id
    alt_port = alt.network.create_port(network_id=theirs)
    # A port of demo's that some server has (its device_id set).
    used = demo.network.create_port(network_id=neutron["net"].id,
                                    device_id=str(uuidlib.uuid4()))
    for networks, status, message in (
            ([{"uuid": theirs}], 400, f"Network {theirs} could not be found."),
            ([{"port": alt_port.id}], 400, f"Port id {alt_port.id} could not be found."),
            ([{"port": used.id}], 409, f"Port {used.id} is still in use."),
            ([{"uuid": neutron["net"].id, "fixed_ip": "10.99.0.5"}], 400,
             f"Fixed IP address 10.99.0.5 is not in a subnet of network "
             f"{neutron['net'].id}.")):
        exc = refused(cloud, networks)
        assert exc.status_code == status, exc
        assert message in str(exc), exc
    assert list(demo.compute.servers()) == []
    assert not cloud.usage("demo").get("consumer_count")
    demo.network.delete_port(used)
    alt.network.delete_port(alt_port)


def test_more_servers_than_the_projects_free_ports_allow_are_refused_or_fewer(
        network: NetworkStack, cloud: Cloud, neutron: dict[str, Any]) -> None:
    """Neutron's port quota, checked before anything is claimed as Nova's validate_networks
    checks it: a thousand NICs on one server are refused at once (a spec carries 16); with
    room for one more port in demo's quota, two servers (min_count) are 403, and one to
    three (max_count) make one."""
    demo, admin = cloud.connect("demo"), cloud.connect("admin")
    project = cloud.project_id("demo")
    net = neutron["net"].id
    session, url = cloud.session("demo"), f"{cloud.api.endpoint}/servers"

    def create(**more: Any) -> Any:
        return session.post(url, raise_exc=False, json={"server": {
            "name": "quota", "flavorRef": "1", "imageRef": IMAGE, **more}})

    answer = create(networks=[{"uuid": net}] * 1000)
    assert (answer.status_code, answer.json()["badRequest"]["message"]) == (
        400, "At most 16 networks or ports per server here")
    used = len(list(admin.network.ports(project_id=project)))
    admin.network.update_quota(project, ports=used + 1)
    try:
        answer = create(networks=[{"uuid": net}], min_count=2)
        assert (answer.status_code, answer.json()["forbidden"]["message"]) == (
            403, "Maximum number of ports exceeded"), answer.text
        assert list(demo.compute.servers()) == []
        assert not cloud.usage("demo").get("consumer_count")
        answer = create(networks=[{"uuid": net}], min_count=1, max_count=3)
        assert answer.status_code == 202, answer.text
        made = list(demo.compute.servers())
        assert len(made) == 1, made
    finally:
        for left in demo.compute.servers():
            demo.compute.delete_server(left)
            demo.compute.wait_for_delete(left, wait=60, interval=0.5)
        admin.network.delete_quota(project)  # back to Neutron's defaults
        wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=30,
                 what="the claim freed")


@pytest.fixture
def server(network: NetworkStack, cloud: Cloud, neutron: dict[str, Any]
           ) -> Iterator[tuple[Any, Any]]:
    """demo's ACTIVE server on demo-net in group web, and the port its host made for it
    (device_id the server, device_owner compute:nova, bound to the host, in group web);
    the port is gone once the server is."""
    demo, admin = cloud.connect("demo"), cloud.connect("admin")
    made = demo.compute.create_server(name="on-neutron", flavor_id="1", image_id=IMAGE,
                                      networks=[{"uuid": neutron["net"].id}],
                                      security_groups=[{"name": "web"}])
    try:
        made = demo.compute.wait_for_server(made, status="ACTIVE", wait=60, interval=0.5)
        (port,) = admin.network.ports(device_id=made.id)
        assert (port.network_id, port.project_id, port.device_owner,
                port.security_group_ids) == (neutron["net"].id, cloud.project_id("demo"),
                                             "compute:nova", [neutron["web"].id])
        assert port.binding_host_id == f"api-host-{cloud.host[:6]}"  # the host's name
        yield made, port
    finally:
        demo.compute.delete_server(made)
        demo.compute.wait_for_delete(made, wait=60, interval=0.5)
        wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=30,
                 what="the claim freed")
        assert list(admin.network.ports(device_id=made.id)) == []


def test_the_spec_carries_the_networks_and_groups_the_api_checked(
        cloud: Cloud, neutron: dict[str, Any], server: tuple[Any, Any]) -> None:
    made, _ = server
    spec = messages.decode(messages.INSTANCE_SPEC,
                           cloud.store.get(cloud.store.keys.spec(cloud.host, made.id)).value)
    assert spec["networks"] == [{"uuid": neutron["net"].id}]
    assert spec["security_groups"] == [neutron["web"].id]


def test_auto_is_the_projects_one_network(network: NetworkStack, cloud: Cloud,
                                          neutron: dict[str, Any]) -> None:
    demo = cloud.connect("demo")
    made = demo.compute.create_server(name="auto", flavor_id="1", image_id=IMAGE,
                                      networks="auto")
    try:
        spec = messages.decode(messages.INSTANCE_SPEC, cloud.store.get(
            cloud.store.keys.spec(cloud.host, made.id)).value)
        assert spec["networks"] == [{"uuid": neutron["net"].id}]
        assert "security_groups" not in spec  # Neutron's default group of the project
    finally:
        demo.compute.delete_server(made)
        demo.compute.wait_for_delete(made, wait=60, interval=0.5)
        wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=30,
                 what="the claim freed")


def test_the_servers_addresses_are_its_ports(cloud: Cloud, neutron: dict[str, Any],
                                             server: tuple[Any, Any],
                                             tmp_path: Path) -> None:
    made, port = server
    demo = cloud.connect("demo")
    [fixed] = port.fixed_ips
    address = {"version": 4, "addr": fixed["ip_address"], "OS-EXT-IPS:type": "fixed",
               "OS-EXT-IPS-MAC:mac_addr": port.mac_address}
    assert demo.compute.get_server(made.id).addresses == {"demo-net": [address]}
    assert [s.addresses for s in demo.compute.servers(details=True)] == [
        {"demo-net": [address]}]
    session, url = cloud.session("demo"), f"{cloud.api.endpoint}/servers/{made.id}"
    assert session.get(f"{url}/ips").json() == {
        "addresses": {"demo-net": [{"version": 4, "addr": fixed["ip_address"]}]}}
    assert session.get(f"{url}/ips/demo-net").json() == {
        "demo-net": [{"version": 4, "addr": fixed["ip_address"]}]}
    # The `openstack` command line shows them too.
    clouds = local_cloud.write_clouds_yaml(cloud.keystone, tmp_path / "clouds.yaml")
    shells = OpenStackShells(OPENSTACK.parent / "python",
                             {**os.environ, "OS_CLIENT_CONFIG_FILE": str(clouds)})
    try:
        done = shells.run("etcd-compute-demo", "server", "show", made.id, "-f", "json",
                          timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        shown = json.loads(done.stdout)
        assert fixed["ip_address"] in json.dumps(shown["addresses"])
        assert "web" in json.dumps(shown["security_groups"])
    finally:
        shells.close()


def test_the_servers_security_groups_are_its_ports(cloud: Cloud, neutron: dict[str, Any],
                                                   server: tuple[Any, Any]) -> None:
    made, port = server
    demo = cloud.connect("demo")
    session, url = cloud.session("demo"), f"{cloud.api.endpoint}/servers/{made.id}"
    [web] = session.get(f"{url}/os-security-groups").json()["security_groups"]
    assert (web["id"], web["name"], web["description"], web["tenant_id"]) == (
        neutron["web"].id, "web", "ssh", cloud.project_id("demo"))
    [ssh] = [r for r in web["rules"] if r["ip_protocol"] == "tcp"]
    assert (ssh["from_port"], ssh["to_port"], ssh["ip_range"], ssh["group"]) == (
        22, 22, {"cidr": "192.0.2.0/24"}, {})
    default = demo.network.find_security_group("default",
                                               project_id=cloud.project_id("demo"))
    demo.compute.add_security_group_to_server(made, default)
    assert set(demo.network.get_port(port.id).security_group_ids) == {
        neutron["web"].id, default.id}
    demo.compute.remove_security_group_from_server(made, neutron["web"])
    assert demo.network.get_port(port.id).security_group_ids == [default.id]
    answer = session.post(f"{url}/action", json={"removeSecurityGroup": {"name": "web"}},
                          raise_exc=False)
    assert answer.status_code == 404
    assert answer.json()["itemNotFound"]["message"] == \
        f"Security group web not associated with the instance {made.id}"
    # alt neither finds demo's group nor demo's server.
    alt = cloud.session("alt")
    assert alt.get(f"{url}/os-security-groups", raise_exc=False).status_code == 404


def test_the_servers_interfaces_are_its_ports(cloud: Cloud, neutron: dict[str, Any],
                                              server: tuple[Any, Any]) -> None:
    import openstack.exceptions

    made, port = server
    demo = cloud.connect("demo")
    [interface] = list(demo.compute.server_interfaces(made))
    assert (interface.port_id, interface.net_id, interface.mac_addr,
            interface.fixed_ips) == (port.id, neutron["net"].id, port.mac_address,
                                     port.fixed_ips)
    assert demo.compute.get_server_interface(port.id, server=made).port_id == port.id
    # The fake driver has no guest to plug a port into: the host refuses the attach and the
    # API answers as Nova does for a driver's refusal (500, InterfaceAttachFailed); the
    # port the host made for it is given back: nothing is left.
    with pytest.raises(openstack.exceptions.HttpException) as caught:
        demo.compute.create_server_interface(made, net_id=neutron["net"].id)
    assert caught.value.status_code == 500
    assert "Failed to attach network adapter device" in str(caught.value)
    assert [p.id for p in demo.network.ports(device_id=made.id)] == [port.id]


def test_a_floating_ip_on_the_servers_port_is_among_its_addresses(
        cloud: Cloud, neutron: dict[str, Any], server: tuple[Any, Any]) -> None:
    made, port = server
    demo, admin = cloud.connect("demo"), cloud.connect("admin")
    public = admin.network.create_network(name="public", is_router_external=True)
    router = fip = None
    try:
        admin.network.create_subnet(network_id=public.id, ip_version=4,
                                    cidr="198.51.100.0/24", is_dhcp_enabled=False)
        router = demo.network.create_router(
            name="demo-router", external_gateway_info={"network_id": public.id})
        [subnet] = list(demo.network.subnets(network_id=neutron["net"].id))
        demo.network.add_interface_to_router(router, subnet_id=subnet.id)
        fip = demo.network.create_ip(floating_network_id=public.id, port_id=port.id)
        shown = demo.compute.get_server(made.id).addresses["demo-net"]
        assert [(a["addr"], a["OS-EXT-IPS:type"]) for a in shown] == [
            (port.fixed_ips[0]["ip_address"], "fixed"), (fip.floating_ip_address, "floating")]
    finally:
        if fip is not None:
            demo.network.delete_ip(fip)
        if router is not None:
            demo.network.remove_interface_from_router(router, subnet_id=subnet.id)
            demo.network.delete_router(router)
        admin.network.delete_network(public)


ANSIBLE_PLAYBOOK = REPO / ".venv-ansible" / "bin" / "ansible-playbook"
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: demo's server
      openstack.cloud.server:
        cloud: etcd-compute-demo
        name: from-ansible
        image: {image}
        flavor: m1.tiny
        network: demo-net
        security_groups: [web]
        metadata: {{role: web}}
        tags: [web]
        description: made by Ansible
        auto_ip: {auto_ip}
        delete_ips: {auto_ip}
        wait: true
        timeout: 120
        state: {state}
"""


def ansible(cloud: Cloud, tmp_path: Path, image: str, state: str,
            auto_ip: bool = False) -> str:
    """The playbook's run as demo (`state` present or absent; with `auto_ip`, a floating
    IP made for the server and deleted with it): its recap's `changed=N`."""
    if not ANSIBLE_PLAYBOOK.exists():
        unavailable(f"{ANSIBLE_PLAYBOOK} is missing (make install builds .venv-ansible)")
    book = tmp_path / f"{state}.yml"
    book.write_text(PLAYBOOK.format(image=image, state=state, auto_ip=str(auto_ip).lower()))
    clouds = local_cloud.write_clouds_yaml(cloud.keystone, tmp_path / "clouds.yaml")
    home = tmp_path / "ansible"
    done = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", "-c", "local", "-e",
         f"ansible_python_interpreter={ANSIBLE_PLAYBOOK.parent / 'python'}", str(book)],
        env={"PATH": os.environ["PATH"], "HOME": str(home), "ANSIBLE_HOME": str(home),
             "ANSIBLE_LOCAL_TEMP": str(home / "tmp"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_FORCE_COLOR": "0", "OS_CLIENT_CONFIG_FILE": str(clouds)},
        capture_output=True, text=True, timeout=300, check=False)
    recap = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0",
                      done.stdout)
    assert done.returncode == 0 and recap, done.stdout[-4000:] + done.stderr[-2000:]
    return recap.group(1)


@pytest.fixture
def demo_image(cloud: Cloud, glance_section: dict[str, Any], tmp_path: Path) -> Iterator[str]:
    """A small raw image of demo's in Glance (Ansible looks its image up there)."""
    from etcd_compute.glance import GlanceClient

    glance = GlanceClient(glance_section)
    disk = tmp_path / "disk.raw"
    disk.write_bytes(b"\0" * (1 << 20))
    image, _ = local_cloud.upload_image(glance, disk, f"ansible-{uuidlib.uuid4().hex[:8]}",
                                        owner=cloud.project_id("demo"),
                                        visibility="private")
    yield str(image["id"])
    glance.delete(image["id"])


def remove_ansibles_servers(cloud: Cloud) -> None:
    demo = cloud.connect("demo")
    for left in demo.compute.servers(name="from-ansible"):
        demo.compute.delete_server(left)
        demo.compute.wait_for_delete(left, wait=60, interval=0.5)
    wait_for(lambda: not cloud.usage("demo").get("consumer_count"), timeout=30,
             what="the claim freed")


def test_an_ansible_server_task_run_again_on_its_server_changes_nothing(
        network: NetworkStack, cloud: Cloud, neutron: dict[str, Any], demo_image: str,
        tmp_path: Path) -> None:
    """Ansible's `openstack.cloud.server` (the collection Ansible bundles, openstacksdk
    under it), as a playbook names a server: the first run creates it (changed), the
    second finds it as asked (its network and security groups read through Nova's
    os-security-groups and Neutron; its metadata, tags and description in the server's
    view) and changes nothing; `state: absent` deletes it once."""
    demo = cloud.connect("demo")
    try:
        assert ansible(cloud, tmp_path, demo_image, "present") == "1"
        made = demo.compute.find_server("from-ansible")
        made = demo.compute.get_server(made.id) if made else None
        assert made is not None and made.status == "ACTIVE"
        assert (made.metadata, made.tags, made.description) == (
            {"role": "web"}, ["web"], "made by Ansible")
        assert ansible(cloud, tmp_path, demo_image, "present") == "0"
        assert [s.id for s in demo.compute.servers(name="from-ansible")] == [made.id]
        assert ansible(cloud, tmp_path, demo_image, "absent") == "1"
        assert ansible(cloud, tmp_path, demo_image, "absent") == "0"
    finally:
        remove_ansibles_servers(cloud)


def test_an_ansible_server_with_a_floating_ip_run_again_changes_nothing(
        network: NetworkStack, cloud: Cloud, neutron: dict[str, Any], demo_image: str,
        tmp_path: Path) -> None:
    """`auto_ip: true`, as nodepool's and most playbooks' servers are made: openstacksdk
    finds the external network behind demo's router, makes a floating IP for the server's
    port and waits for it in our server view (`OS-EXT-IPS:type: floating`); run again, the
    view shows it and nothing changes; `state: absent` with `delete_ips` deletes both."""
    demo, admin = cloud.connect("demo"), cloud.connect("admin")
    public = admin.network.create_network(name="public", is_router_external=True)
    router = subnet = None
    try:
        admin.network.create_subnet(network_id=public.id, ip_version=4,
                                    cidr="198.51.100.0/24", is_dhcp_enabled=False)
        router = demo.network.create_router(
            name="ansible-router", external_gateway_info={"network_id": public.id})
        [subnet] = list(demo.network.subnets(network_id=neutron["net"].id))
        demo.network.add_interface_to_router(router, subnet_id=subnet.id)
        assert ansible(cloud, tmp_path, demo_image, "present", auto_ip=True) == "1"
        made = demo.compute.find_server("from-ansible")
        assert made is not None
        shown = demo.compute.get_server(made.id).addresses["demo-net"]
        [floating] = [a["addr"] for a in shown if a["OS-EXT-IPS:type"] == "floating"]
        assert [ip.floating_ip_address for ip in demo.network.ips()] == [floating]
        assert ansible(cloud, tmp_path, demo_image, "present", auto_ip=True) == "0"
        assert [ip.floating_ip_address for ip in demo.network.ips()] == [floating]
        assert ansible(cloud, tmp_path, demo_image, "absent", auto_ip=True) == "1"
        assert list(demo.network.ips()) == []
    finally:
        remove_ansibles_servers(cloud)
        for ip in demo.network.ips():
            demo.network.delete_ip(ip)
        if router is not None:
            if subnet is not None:
                demo.network.remove_interface_from_router(router, subnet_id=subnet.id)
            demo.network.delete_router(router)
        admin.network.delete_network(public)
