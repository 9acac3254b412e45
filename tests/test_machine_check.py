"""`make test` fails, saying why, where the integration tests cannot run (issue 11 item 9)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import machine_check
import pytest
from pdfleet.paths import REPO_ROOT


def test_not_root_fails_with_the_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert machine_check.main() == 2
    err = capsys.readouterr().err
    assert "needs root" in err and "cannot run the integration tests" in err


def test_missing_systemd_nspawn_fails_with_the_reason() -> None:
    env = {"PATH": "/nonexistent", "PYTHONPATH": str(REPO_ROOT / "scripts")}
    proc = subprocess.run([sys.executable, str(Path(machine_check.__file__))], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 2
    assert "systemd-nspawn" in proc.stderr or "systemd-container" in proc.stderr


def test_make_test_runs_the_machine_check_before_pytest() -> None:
    proc = subprocess.run(["make", "-n", "test"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    pre = next(i for i, line in enumerate(lines) if "tests/machine_check.py" in line)
    assert pre < next(i for i, line in enumerate(lines) if "tests/suite.py" in line)  # the runner of pytest
