"""compute/check.py (`compute.py --check`): one line per thing that is good, in order, and the
first fault as one line: certificates (a PKI in a tmp dir), then etcd, Placement, the driver
and metrics (stand-ins here; the real services in tests/compute/test_config_and_cli.py).
Connections are closed whatever happens."""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from etcd_compute.compute import check
from etcd_compute.config import deep_merge
from etcd_compute.defaults import COMPUTE_DEFAULTS
from etcd_compute.errors import ConfigError, EtcdUnavailable, ServiceUnavailable
from etcd_compute.pki import COMPUTE, Pki, compute_name

RP = "0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"))
    pki.init("check-tests")
    return pki


def tls(pki: Pki, name: str) -> dict[str, str]:
    issued = pki.issue(name, COMPUTE)
    return {"ca_cert": str(pki.ca_cert), "cert": str(issued.cert), "key": str(issued.key)}


def config_with(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    return deep_merge(COMPUTE_DEFAULTS, {
        "compute": {"state_dir": str(tmp_path / "state"), "uuid": RP},
        "driver": {"name": "fake"}, **sections})


# -- certificates ---------------------------------------------------------------------------


def test_without_certificates_only_the_identity_is_said(tmp_path):
    assert check.certificates(config_with(tmp_path)) == [f"identity: {RP}"]


def test_each_good_certificate_is_one_line_then_the_identity_it_names(tmp_path, pki):
    host = tls(pki, compute_name(RP))
    config = config_with(tmp_path, etcd=host, placement=host, compute={"uuid": None})
    assert check.certificates(config) == [
        f"etcd certificate: ok ({host['cert']})",
        f"placement certificate: ok ({host['cert']})",
        f"identity: {RP}",  # from the certificate's CN: compute.uuid is not set
    ]


def test_a_certificate_without_its_ca_is_refused(tmp_path, pki):
    host = tls(pki, compute_name(RP))
    config = config_with(tmp_path, placement={**host, "ca_cert": None})
    with pytest.raises(ConfigError, match=r"^placement.cert needs placement.ca_cert$"):
        check.certificates(config)


def test_the_first_fault_is_named_with_its_section(tmp_path, pki):
    stranger = Pki(tmp_path / "stranger")
    stranger.init("another cluster")
    foreign = tls(stranger, compute_name(RP))
    config = config_with(tmp_path, etcd=tls(pki, compute_name(RP)),
                         placement={**foreign, "ca_cert": str(pki.ca_cert)})
    with pytest.raises(ConfigError) as caught:
        check.certificates(config)
    assert str(caught.value).startswith(f"placement: {foreign['cert']}: not signed by the CA")
    assert "\n" not in str(caught.value)


def test_a_key_of_another_certificate_is_refused(tmp_path, pki):
    host, other = tls(pki, compute_name(RP)), tls(pki, "someone-else")
    config = config_with(tmp_path, etcd={**host, "key": other["key"]})
    with pytest.raises(ConfigError, match=f"^etcd: {other['key']}: does not match"):
        check.certificates(config)


def test_a_certificate_for_another_host_is_refused(tmp_path, pki):
    other = str(uuidlib.uuid4())
    config = config_with(tmp_path, etcd=tls(pki, compute_name(other)))
    with pytest.raises(ConfigError, match=f"is for host {other}, but compute.uuid is {RP}"):
        check.certificates(config)


# -- the services ---------------------------------------------------------------------------


class Services:
    """Stand-ins for the store, Placement and the driver; each says whether it was closed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.etcd_fault: Exception | None = None
        self.driver_fault: Exception | None = None
        self.closed: list[str] = []
        services = self

        class Store:
            def __init__(self, settings: dict[str, Any]):
                self.endpoints = settings["endpoints"]
                self.client = SimpleNamespace(status=self.status)

            def errors(self) -> Any:
                return contextlib.nullcontext()

            def status(self) -> Any:
                if services.etcd_fault:
                    raise services.etcd_fault
                return SimpleNamespace(version="3.5.17")

            def close(self) -> None:
                services.closed.append("etcd")

        class Placement:
            def __init__(self, settings: dict[str, Any]):
                self.endpoint = settings["endpoint"]

            def check(self) -> str:
                return f"Placement 1.0..1.39 at {self.endpoint}"

        class Driver:
            def check(self) -> str:
                if services.driver_fault:
                    raise services.driver_fault
                return "fake"

            def close(self) -> None:
                services.closed.append("driver")

        monkeypatch.setattr(check, "Store", Store)
        monkeypatch.setattr(check, "PlacementClient", Placement)
        monkeypatch.setattr(check, "load_driver", lambda _config: Driver())


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> Services:
    return Services(monkeypatch)


def test_every_part_is_one_line_in_order(tmp_path, services):
    config = config_with(tmp_path, etcd={"endpoints": ["10.0.0.1:2379", "10.0.0.2:2379"]})
    assert check.check(config) == [
        "config: ok",
        f"identity: {RP}",
        "etcd: ok (version 3.5.17, 10.0.0.1:2379, 10.0.0.2:2379)",
        "placement: ok (Placement 1.0..1.39 at http://127.0.0.1:8080)",
        "driver: ok (fake)",
        "metrics: off",
        "console relay: off",
    ]
    assert services.closed == ["etcd", "driver"]


def test_metrics_say_where_they_are_served(tmp_path, services):
    config = config_with(tmp_path, compute={"metrics_listen": "127.0.0.1:9180"})
    assert check.check(config)[-2] == "metrics: ok (http://127.0.0.1:9180/metrics)"


def test_an_unreachable_etcd_stops_the_check_and_its_connection_is_closed(tmp_path, services):
    services.etcd_fault = EtcdUnavailable("etcd at 10.0.0.1:2379 is unreachable")
    with pytest.raises(EtcdUnavailable):
        check.check(config_with(tmp_path))
    assert services.closed == ["etcd"]


def test_an_unusable_hypervisor_stops_the_check_and_the_driver_is_closed(tmp_path, services):
    services.driver_fault = ServiceUnavailable("libvirt qemu:///system: no such socket")
    with pytest.raises(ServiceUnavailable, match="libvirt"):
        check.check(config_with(tmp_path))
    assert services.closed == ["etcd", "driver"]


def test_on_neutron_neutron_is_checked_before_the_driver(tmp_path, services, monkeypatch):
    class Neutron:
        endpoint = "https://neutron.invalid:9696"

        def __init__(self, settings: dict[str, Any]):
            assert settings["integration_bridge"] == "br-int"

        def networks(self, **filters: Any) -> list[dict[str, Any]]:
            return [{"id": "a"}, {"id": "b"}]

    monkeypatch.setattr(check, "NeutronClient", Neutron)
    config = config_with(tmp_path, network={"backend": "neutron"})
    config["compute"]["name"] = "hv1"
    lines = check.check(config)
    assert lines[lines.index("driver: ok (fake)") - 1] == (
        "neutron: ok (https://neutron.invalid:9696, 2 network(s); guests plugged into br-int "
        "as hv1)")


def test_the_console_relay_says_where_it_listens_with_a_good_certificate(tmp_path, pki):
    from etcd_compute.pki import CONSOLE_RELAY

    relay = pki.issue("console-relay-check", CONSOLE_RELAY, ips=["10.0.0.1"])
    console = {"listen": "10.0.0.1:6081", "cert": str(relay.cert), "key": str(relay.key),
               "ca_cert": str(pki.ca_cert)}
    assert check.console_relay(config_with(tmp_path, console=console)) == \
        f"console relay: ok (10.0.0.1:6081, {relay.cert})"
    other = Pki(tmp_path / "other")
    other.init("other")
    with pytest.raises(ConfigError, match="console: .*not signed by the CA"):
        check.console_relay(config_with(tmp_path, console={
            **console, "ca_cert": str(other.ca_cert)}))
    with pytest.raises(ConfigError, match="console.key is needed"):
        check.console_relay(config_with(tmp_path, console={**console, "key": None}))
    with pytest.raises(ConfigError, match="console.listen"):
        check.console_relay(config_with(tmp_path, console={**console, "listen": "hv1:6081"}))
