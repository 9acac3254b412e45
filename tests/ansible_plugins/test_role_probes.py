"""Role probes (files/probe.py, run by pdfleet_probe) on a host with odd files: a file owned by a user or group
that no longer exists is reported with the number, not a crash of the role's look."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

ROLES = REPO_ROOT / "ansible" / "roles"
NOBODY_ID = 54321  # no user or group on a test machine has it


def _probe(role: str, settings: dict) -> dict:
    source = (ROLES / role / "files" / "probe.py").read_text()
    proc = subprocess.run([sys.executable, "-I", "-c", source], input=json.dumps(settings) + "\n",
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


@pytest.fixture
def orphan(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("chown to an unknown uid needs root")
    f = tmp_path / "orphan.conf"
    f.write_text("left behind\n")
    os.chown(f, NOBODY_ID, NOBODY_ID)
    return f


def test_monitoring_probe_names_an_unknown_owner_by_number(orphan: Path) -> None:
    out = _probe("pdfleet_monitoring", {"package": "pdfleet-no-such-package", "files": [str(orphan)],
                                        "unit": "pdfleet-no-such.service"})
    assert out["files"][str(orphan)]["owner"] == str(NOBODY_ID)
    assert out["files"][str(orphan)]["group"] == str(NOBODY_ID)
    assert out["installed"] is False


def test_cuda_toolkit_probe_names_an_unknown_owner_by_number(orphan: Path, tmp_path: Path) -> None:
    out = _probe("cuda_toolkit", {"source": str(tmp_path / "none.sources"), "profile": str(orphan),
                                  "nvcc": str(tmp_path / "no-nvcc")})
    assert (out["profile"]["owner"], out["profile"]["group"]) == (str(NOBODY_ID), str(NOBODY_ID))
    assert out["source_exists"] is False
