"""The conformance suite ships in the package (pdfleet.conformance_suite) and `pdfleet conformance` runs that copy:
collected here per host of the sim inventory (pytest --collect-only through the command: no host is contacted),
so `make test` still proves the suite imports and parametrises. Nothing under tests/ holds a second copy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pdfleet import conformance
from pdfleet.paths import PACKAGE_DIR, REPO_ROOT

BIN = Path(sys.executable).parent


def test_the_suite_is_package_code() -> None:
    assert conformance.SUITE_DIR == PACKAGE_DIR / "conformance_suite"
    assert (conformance.SUITE_DIR / "__init__.py").is_file()
    assert (conformance.SUITE_DIR / "test_conformance.py").is_file()
    assert not (REPO_ROOT / "tests" / "conformance").exists()


def test_pdfleet_conformance_collects_the_packaged_suite_per_host(tmp_path: Path) -> None:
    proc = subprocess.run([str(BIN / "pdfleet"), "conformance", "-i", str(REPO_ROOT / "inventory" / "sim"), "--",
                           "--collect-only"], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ids = [line.rsplit("::", 1)[-1] for line in proc.stdout.splitlines() if "::" in line]
    names = {i.split("[", 1)[0] for i in ids}
    assert {"test_gpus_match_the_model", "test_sglang_version_and_patch", "test_router_ready"} <= names, ids
    assert all(i.endswith("[node1]") for i in ids), ids  # inventory/sim: one host, node1
    assert "conformance_suite/test_conformance.py" in proc.stdout
