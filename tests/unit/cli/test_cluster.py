"""cluster.py in-process: the PKI commands on a temporary directory (real certificates), where
the certificates go, and the etcd and host commands wired to the PKI and to etcd's users and
roles (an in-memory stand-in for those: tests/unit/test_etcd_auth.py tests them). Bad input
is exit status 2 and one line. Against a real etcd: tests/cluster, tests/conftest.py."""

from __future__ import annotations

import re
import uuid as uuidlib
from pathlib import Path
from typing import Any

import pytest

import etcd_compute.etcd
import etcd_compute.etcd_auth
from etcd_compute.cli import cluster
from etcd_compute.errors import EtcdUnavailable
from etcd_compute.pki import Pki, load_certificate
from tests.unit.cli import helpers

HOST = "0b5f4b8e-7a59-4a8e-9a59-2f1d7c6e8a10"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return helpers.run(cluster.main, capsys, *argv)


def assert_usage_error(result: tuple[int, str, str], *fragments: str) -> None:
    helpers.assert_usage_error("cluster.py", result, *fragments)


@pytest.fixture(autouse=True)
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run where no schedule.yaml is (cluster.py reads one from the working directory)."""
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")


@pytest.fixture
def pki_dir(tmp_path: Path) -> str:
    return str(tmp_path / "pki")


@pytest.fixture
def schedule_yaml(tmp_path: Path) -> str:
    path = tmp_path / "conf" / "schedule.yaml"
    path.parent.mkdir()
    path.write_text("etcd:\n  endpoints: ['10.0.0.1:2379']\n  prefix: /prod\n"
                    "  ca_cert: certs/ca.crt\n")
    return str(path)


class Auth:
    """EtcdAuth as the CLI uses it: what was asked of etcd's users and roles."""

    calls: list[tuple[str, Any]] = []

    def __init__(self, store: Any):
        self.store = store

    def setup(self, operators: list[str]) -> None:
        self.calls.append(("setup", list(operators)))

    def add_host(self, rp_uuid: str) -> str:
        self.calls.append(("add_host", rp_uuid))
        return f"compute-{rp_uuid}"

    def remove_host(self, rp_uuid: str) -> None:
        self.calls.append(("remove_host", rp_uuid))


class RootStore:
    """The Store `_root_store` opens; remembers its configuration and whether it was closed."""

    opened: list[RootStore] = []

    def __init__(self, config: dict[str, Any]):
        self.config, self.closed = config, False
        self.opened.append(self)

    def __enter__(self) -> RootStore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.closed = True


@pytest.fixture
def etcd(monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[str, Any]], list[RootStore]]:
    monkeypatch.setattr(Auth, "calls", [])
    monkeypatch.setattr(RootStore, "opened", [])
    monkeypatch.setattr(etcd_compute.etcd_auth, "EtcdAuth", Auth)
    monkeypatch.setattr(etcd_compute.etcd, "Store", RootStore)
    return Auth.calls, RootStore.opened


# -- pki -------------------------------------------------------------------------------------


def test_pki_init_creates_the_ca_once(capsys, pki_dir):
    assert run(capsys, "--pki", pki_dir, "pki", "init") == (0, f"created CA {pki_dir}/ca.crt\n",
                                                            "")
    assert run(capsys, "--pki", pki_dir, "pki", "init") == (0, f"kept CA {pki_dir}/ca.crt\n", "")


def test_pki_issue_writes_what_was_asked_and_keeps_a_good_one(capsys, pki_dir):
    run(capsys, "--pki", pki_dir, "pki", "init")
    argv = ("--pki", pki_dir, "pki", "issue", "etcd-member", "etcd-1", "--ip", "10.0.0.1",
            "--ip", "10.0.0.2", "--dns", "etcd-1.example", "--days", "90")
    paths = f"{pki_dir}/etcd-1.crt {pki_dir}/etcd-1.key\n"
    assert run(capsys, *argv) == (0, f"issued {paths}", "")
    assert Pki(pki_dir).problems(Path(pki_dir, "etcd-1.crt"), Path(pki_dir, "etcd-1.key"),
                                 want_ips=["10.0.0.1", "10.0.0.2"],
                                 want_dns=["etcd-1.example"]) == []
    assert run(capsys, *argv) == (0, f"kept {paths}", "")
    assert run(capsys, *argv, "--renew") == (0, f"issued {paths}", "")


def test_pki_issue_before_init_is_one_line(capsys, pki_dir):
    code, out, err = run(capsys, "--pki", pki_dir, "pki", "issue", "operator", "alice")
    assert (code, out) == (2, "")
    assert err == f"cluster.py: error: no CA in {pki_dir}; create it first (pki init)\n"


def test_pki_list_says_until_when_and_what_is_wrong(capsys, pki_dir, tmp_path):
    run(capsys, "--pki", pki_dir, "pki", "init")
    run(capsys, "--pki", pki_dir, "pki", "issue", "operator", "alice")
    run(capsys, "--pki", pki_dir, "pki", "issue", "operator", "bob", "--days", "10")
    other = Pki(tmp_path / "other")
    other.init()
    stranger = other.issue("mallory", "operator")
    Path(pki_dir, "mallory.crt").write_bytes(stranger.cert.read_bytes())
    code, out, _ = run(capsys, "--pki", pki_dir, "pki", "list")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert list(rows) == ["alice", "bob", "etcd-compute", "mallory"]  # sorted by file name
    until = load_certificate(Path(pki_dir, "alice.crt")).not_valid_after_utc
    assert re.fullmatch(rf"alice +until {until:%Y-%m-%d}  ok", rows["alice"])
    bob_until = load_certificate(Path(pki_dir, "bob.crt")).not_valid_after_utc
    assert rows["bob"].endswith(f"{pki_dir}/bob.crt: expires on {bob_until:%Y-%m-%d}")
    assert rows["etcd-compute"].startswith("etcd-compute CA") and rows["etcd-compute"].endswith(
        "  ok")
    assert "not signed by the CA" in rows["mallory"]


@pytest.mark.parametrize("argv", [("pki",), ("pki", "issue", "admin", "x"), ("pki", "sign"),
                                  ("pki", "issue", "operator", "x", "--days", "many")])
def test_bad_pki_arguments_are_one_line(capsys, pki_dir, argv):
    assert_usage_error(run(capsys, "--pki", pki_dir, *argv))


def test_the_pki_is_where_the_configuration_keeps_etcds_ca(capsys, schedule_yaml, tmp_path):
    assert run(capsys, "--config", schedule_yaml, "pki", "init")[0] == 0
    assert (tmp_path / "conf" / "certs" / "ca.crt").is_file()  # relative to schedule.yaml


def test_pki_dir_defaults():
    args = cluster.parse_args(["pki", "list"])
    assert cluster._pki_dir(args, None) == Path(cluster.DEFAULT_PKI)
    assert cluster._pki_dir(args, {"etcd": {"ca_cert": None}}) == Path(cluster.DEFAULT_PKI)
    assert cluster._pki_dir(args, {"etcd": {"ca_cert": "/srv/pki/ca.crt"}}) == Path("/srv/pki")
    args = cluster.parse_args(["--pki", "/here", "pki", "list"])
    assert cluster._pki_dir(args, {"etcd": {"ca_cert": "/srv/pki/ca.crt"}}) == Path("/here")


# -- etcd and hosts --------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [("etcd", "setup"), ("host", "add", "h1"),
                                  ("host", "remove", HOST)])
def test_etcd_commands_need_a_configuration(capsys, pki_dir, argv, etcd):
    assert_usage_error(run(capsys, "--pki", pki_dir, *argv),
                       f"{argv[0]}: give --config (a schedule.yaml naming etcd)")
    assert etcd == ([], [])


def test_etcd_is_reached_as_root_with_roots_certificate(capsys, schedule_yaml, pki_dir, etcd):
    calls, opened = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    with open(schedule_yaml, "a") as config:  # an operator's password is not root's
        config.write("  user: alice\n  password: secret\n")
    assert run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "etcd", "setup")[0] == 0
    [store] = opened
    assert store.closed
    assert {key: store.config[key] for key in ("endpoints", "prefix", "ca_cert", "cert", "key",
                                               "user", "password")} == {
        "endpoints": ["10.0.0.1:2379"], "prefix": "/prod", "ca_cert": f"{pki_dir}/ca.crt",
        "cert": f"{pki_dir}/root.crt", "key": f"{pki_dir}/root.key", "user": None,
        "password": None}
    assert Pki(pki_dir).problems(Path(pki_dir, "root.crt"), Path(pki_dir, "root.key")) == []


def test_etcd_setup_turns_auth_on_and_issues_the_operators_certificates(capsys, schedule_yaml,
                                                                        pki_dir, etcd):
    calls, _ = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    code, out, err = run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "etcd", "setup",
                         "--operator", "alice", "--operator", "bob")
    assert (code, out, err) == (0, "etcd auth on; operators: alice, bob\n", "")
    assert calls == [("setup", ["alice", "bob"])]
    assert Path(pki_dir, "alice.crt").is_file() and Path(pki_dir, "bob.key").is_file()
    assert run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "etcd", "setup")[1] == \
        "etcd auth on; operators: (none yet)\n"


def test_host_add_issues_its_certificate_and_role(capsys, schedule_yaml, pki_dir, etcd):
    calls, _ = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    code, out, _ = run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "host", "add",
                       "rack1-a", "--uuid", HOST)
    assert code == 0 and calls == [("add_host", HOST)]
    cert = f"{pki_dir}/compute-{HOST}.crt"
    assert out.splitlines() == [
        f"host rack1-a: uuid {HOST}", f"  etcd.ca_cert: {pki_dir}/ca.crt",
        f"  etcd.cert: {cert}", f"  etcd.key: {pki_dir}/compute-{HOST}.key",
        "  (the same three for placement:)"]
    assert Pki(pki_dir).problems(Path(cert), Path(pki_dir, f"compute-{HOST}.key")) == []


def test_host_add_without_a_uuid_makes_one(capsys, schedule_yaml, pki_dir, etcd):
    calls, _ = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    out = run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "host", "add", "h")[1]
    [(_, made)] = calls
    assert str(uuidlib.UUID(made)) == made and f"uuid {made}" in out
    assert Path(pki_dir, f"compute-{made}.crt").is_file()


@pytest.mark.parametrize("argv", [("host", "add", "h", "--uuid", "../../etc\x1b[2J"),
                                  ("host", "add", "h", "--uuid", HOST.upper()),
                                  ("host", "remove", f"{HOST}\n")])
def test_a_host_uuid_that_is_not_one_is_refused_in_one_line(capsys, schedule_yaml, pki_dir,
                                                             etcd, argv):
    calls, _ = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    result = run(capsys, "--config", schedule_yaml, "--pki", pki_dir, *argv)
    assert_usage_error(result, "not a uuid")
    assert "\x1b" not in result[2]
    assert calls == [] and not list(Path(pki_dir).glob("compute-*"))


def test_host_remove_removes_its_user_and_role(capsys, schedule_yaml, pki_dir, etcd):
    calls, _ = etcd
    run(capsys, "--pki", pki_dir, "pki", "init")
    assert run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "host", "remove", HOST) == (
        0, f"host {HOST}: etcd user and role removed\n", "")
    assert calls == [("remove_host", HOST)]


def test_etcd_unreachable_is_one_line_and_its_exit_status(capsys, schedule_yaml, pki_dir, etcd,
                                                          monkeypatch):
    run(capsys, "--pki", pki_dir, "pki", "init")

    def unreachable(self: Auth, operators: list[str]) -> None:
        # what etcd said is shown, not interpreted
        raise EtcdUnavailable("etcd at 10.0.0.1:2379: TLS handshake failed (\x1b[2J\x07)")

    monkeypatch.setattr(Auth, "setup", unreachable)
    assert run(capsys, "--config", schedule_yaml, "--pki", pki_dir, "etcd", "setup") == (
        3, "", "cluster.py: error: etcd at 10.0.0.1:2379: TLS handshake failed "
               "(\\x1b[2J\\x07)\n")
    assert etcd[1][0].closed


def test_an_interrupt_is_exit_status_130(monkeypatch):
    def interrupted(_args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(cluster, "run", interrupted)
    assert cluster.main(["pki", "list"]) == 130


def test_pki_issue_libvirt_writes_a_host_s_libvirt_certificates(capsys, pki_dir, tmp_path):
    run(capsys, "--pki", pki_dir, "pki", "init")
    target = tmp_path / "hv1"
    code, out, err = run(capsys, "--pki", pki_dir, "pki", "issue-libvirt", "hv1", "--ip",
                         "10.0.0.1", "--dir", str(target), "--qemu-group", "none")
    assert (code, err) == (0, "")
    assert out == f"libvirt certificates of hv1 in {target} (qemu's in {target}/qemu)\n"
    assert (target / "servercert.pem").exists() and (target / "qemu" / "server-key.pem").exists()
    code, out, err = run(capsys, "--pki", pki_dir, "pki", "issue-libvirt", "hv1", "--ip",
                         "10.0.0.1", "--qemu-group", "no-such-group-here")
    assert code == 2 and "--qemu-group no-such-group-here: no such group here" in err
    code, out, _ = run(capsys, "--pki", pki_dir, "pki", "issue-libvirt", "ctl",
                       "--client-only", "--qemu-group", "none")
    assert code == 0 and f"{pki_dir}/libvirt/ctl" in out
