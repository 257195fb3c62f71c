"""compute.py's behaviour on bad input and with services down or up (the pure configuration
tests are in tests/unit/test_config.py)."""

from __future__ import annotations

from etcd_compute import config as configuration
from tests.support import Run, run_cli
from tools.local_services import free_port


def run_compute(*args: str, timeout: float = 60) -> Run:
    return run_cli("compute.py", *args, timeout=timeout)


def test_compute_bad_config_exits_2_with_one_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("compute:\n  workers: -1\n")
    result = run_compute("--config", str(path))
    assert result.code == 2
    assert result.stderr.startswith("compute.py: error: ") and "compute.workers" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr


def test_compute_missing_config_file(tmp_path):
    result = run_compute("--config", str(tmp_path / "nope.yaml"))
    assert result.code == 2 and "no such configuration file" in result.stderr


def test_compute_unreachable_etcd_is_one_line(tmp_path, write_yaml, compute_config):
    config = configuration.deep_merge(compute_config, {
        "etcd": {"endpoints": [f"127.0.0.1:{free_port()}"], "timeout": 1.0}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)), "--check")
    assert result.code == 3, result.stderr
    assert "etcd at 127.0.0.1:" in result.stderr and "unreachable" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compute_unreachable_placement_is_one_line(tmp_path, write_yaml, compute_config):
    config = configuration.deep_merge(compute_config, {
        "placement": {"endpoint": f"http://127.0.0.1:{free_port()}"}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)))
    assert result.code == 3, result.stderr
    assert "Placement at http://127.0.0.1:" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compute_check_reaches_everything(write_yaml, compute_config):
    result = run_compute("--config", str(write_yaml("c.yaml", compute_config)), "--check")
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "config: ok"
    assert lines[1].startswith("etcd certificate: ok (")
    assert lines[2].startswith("placement certificate: ok (")
    assert lines[3] == f"identity: {compute_config['compute']['uuid']}"
    assert lines[4].startswith("etcd: ok (version 3.")
    assert lines[5].startswith("placement: ok (Placement 1.0..1.")
    assert lines[6] == "driver: ok (fake)"
    assert lines[7] == "metrics: off"
    assert lines[8] == "console relay: off"


def test_compute_check_with_libvirt_test_driver(write_yaml, compute_config, libvirt_test_conn):
    config = configuration.deep_merge(compute_config, {
        "driver": {"name": "libvirt", "libvirt": {"uri": "test:///default"}}})
    result = run_compute("--config", str(write_yaml("c.yaml", config)), "--check")
    assert result.code == 0, result.stderr
    [driver] = [line for line in result.stdout.splitlines() if line.startswith("driver: ")]
    assert driver.startswith("driver: ok (libvirt "), result.stdout


def test_compute_check_names_certificate_faults_in_one_line(write_yaml, compute_config,
                                                            cluster_pki, tmp_path):
    from etcd_compute.pki import COMPUTE, Pki, compute_name

    rp = compute_config["compute"]["uuid"]
    stranger = Pki(tmp_path / "stranger")
    stranger.init("another cluster")
    foreign = stranger.issue(compute_name(rp), COMPUTE)
    expired = cluster_pki.issue("expired-" + rp, COMPUTE, days=0)
    other_host = cluster_pki.issue(compute_name("0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f"),
                                   COMPUTE)
    cases = [
        ({"cert": str(foreign.cert), "key": str(foreign.key)}, 2, "not signed by the CA"),
        ({"cert": str(expired.cert), "key": str(expired.key)}, 2, "expired on"),
        ({"cert": str(other_host.cert), "key": str(other_host.key)}, 2,
         "is for host 0b7e4f1e-9a0c-4a51-8f0e-5d2c3b4a6e7f, but compute.uuid is"),
        ({"key": str(other_host.key)}, 2, "does not match"),
        # The server's certificate is not from the CA we trust: the handshake fails.
        ({"ca_cert": str(stranger.ca_cert), "cert": str(foreign.cert),
          "key": str(foreign.key)}, 3, "TLS handshake failed"),
    ]
    for etcd, code, fault in cases:
        config = configuration.deep_merge(compute_config, {"etcd": etcd})
        result = run_compute("--config", str(write_yaml("c.yaml", config)), "--check")
        assert result.code == code, (etcd, result.stderr)
        assert fault in result.stderr, (fault, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
