"""mdserver.conf: the [mdserver] section, defaults for what it leaves out, one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from etcd_compute.errors import ConfigError
from etcd_compute.mdserver.settings import MdserverConfig, load_config
from tests.support import REPO


def test_mdserver_config(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nport = 8775\nnetwork = other\n")
    config = load_config(conf)
    assert (config.port, config.network, config.bind_address) == (8775, "other", "169.254.169.254")
    conf.write_text("[mdserver]\nprot = 80\n")
    with pytest.raises(ConfigError, match="unknown key 'mdserver.prot'"):
        load_config(conf)


def test_sample_mdserver_conf_loads() -> None:
    config = load_config(REPO / "mdserver.conf")
    assert config.port == 80 and config.instances_dir == "/var/lib/etcd-compute/instances"


def test_an_empty_section_means_the_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\n")
    assert load_config(conf) == MdserverConfig()


def test_every_key_is_read(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nbind_address = 127.0.0.1\nport = 8080\ninstances_dir = /i\n"
                    "libvirt_uri = test:///default\nnetwork = n\nlog_file = /l.log\n")
    assert load_config(conf) == MdserverConfig("127.0.0.1", 8080, "/i", "test:///default", "n",
                                               "/l.log")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[other]\nport = 80\n", "no [mdserver] section"),
        ("[mdserver]\nport = eighty\n", "mdserver.port: not a number"),
        ("port = 80\n", "cannot read: File contains no section headers."),
        ("[mdserver]\nport = 80\nport = 81\n", "cannot read: While reading from"),
    ],
)
def test_bad_files_are_one_line_errors(tmp_path: Path, text: str, message: str) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(conf)
    assert str(caught.value).startswith(f"{conf}: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_missing_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope.conf: cannot read: \[Errno 2\]"):
        load_config(tmp_path / "nope.conf")


def test_the_limits_on_untrusted_clients_are_read_and_bounded(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nthreads = 2\nconnections_per_guest = 3\n"
                    "connection_limit = 50\nidle_timeout_seconds = 5\n"
                    "max_request_header_bytes = 4096\nmax_request_body_bytes = 0\n")
    config = load_config(conf)
    assert (config.threads, config.connections_per_guest, config.connection_limit,
            config.idle_timeout_seconds, config.max_request_header_bytes,
            config.max_request_body_bytes) == (2, 3, 50, 5, 4096, 0)
    defaults = MdserverConfig()
    # A guest's share is small; all guests' together room for 128 guests at their share.
    assert (defaults.threads, defaults.connections_per_guest, defaults.connection_limit,
            defaults.idle_timeout_seconds) == (4, 8, 1024, 10)


@pytest.mark.parametrize(("line", "message"), [
    ("threads = 0", "mdserver.threads: 0 is not in 1..64"),
    ("idle_timeout_seconds = forever", "mdserver.idle_timeout_seconds: not a number"),
    ("connection_limit = 1000000", "mdserver.connection_limit: 1000000 is not in 1..10000"),
    ("port = 70000", "mdserver.port: 70000 is not in 1..65535"),
    ("connections_per_guest = 0", "mdserver.connections_per_guest: 0 is not in 1..1000"),
    ("connections_per_guest = 9\nconnection_limit = 8",
     r"mdserver.connections_per_guest \(9\) is more than mdserver.connection_limit \(8\)"),
])
def test_limits_out_of_range_are_one_line_errors(tmp_path: Path, line: str, message: str) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text(f"[mdserver]\n{line}\n")
    with pytest.raises(ConfigError, match=message):
        load_config(conf)


def test_signed_mode_is_read_with_its_secret_file(tmp_path: Path) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\nmode = signed\nshared_secret_file = /etc/secret\n"
                    "bind_address = 127.0.0.1\nport = 8775\n")
    config = load_config(conf)
    assert (config.mode, config.shared_secret_file) == ("signed", "/etc/secret")
    assert MdserverConfig().mode == "lease"


@pytest.mark.parametrize(("lines", "message"), [
    ("mode = trusting\n", "mdserver.mode: 'trusting' is not one of lease, signed"),
    ("mode = signed\nbind_address = 127.0.0.1\n",
     "mdserver.shared_secret_file: needed in signed mode"),
    # Never every address, nor the guests' own: the agent holds that in its namespaces.
    ("mode = signed\nshared_secret_file = /s\nbind_address = 0.0.0.0\n",
     "0.0.0.0 in signed mode: use loopback or this host's own address"),
    ("mode = signed\nshared_secret_file = /s\n",
     "169.254.169.254 in signed mode: use loopback"),
    ("mode = signed\nshared_secret_file = /s\nbind_address = ::1\n", "::1: IPv4 only"),
    ("mode = signed\nshared_secret_file = /s\nbind_address = localhost\n",
     "'localhost' is not an IP address"),
])
def test_a_signed_mode_without_a_secret_or_on_every_address_is_refused(
        tmp_path: Path, lines: str, message: str) -> None:
    conf = tmp_path / "mdserver.conf"
    conf.write_text("[mdserver]\n" + lines)
    with pytest.raises(ConfigError) as caught:
        load_config(conf)
    assert message in str(caught.value) and "\n" not in str(caught.value)
