"""The schedule.yaml schedule.py's in-process tests run with."""

from __future__ import annotations

from pathlib import Path

import pytest

from etcd_compute import logs


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A schedule.yaml whose services do not exist (nothing here may reach them), and a
    logging setup that leaves pytest's handlers alone."""
    monkeypatch.setattr(logs, "setup", lambda *_args, **_kwargs: None)
    path = tmp_path / "schedule.yaml"
    path.write_text("etcd:\n  endpoints: ['127.0.0.1:9']\n  timeout: 0.1\n"
                    "placement:\n  endpoint: http://127.0.0.1:9\n  timeout: 0.1\n")
    return path
