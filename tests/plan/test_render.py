"""Rendered units: golden files for every shipped profile, byte-stable, identical through Ansible,
and clean under `systemd-analyze verify`."""

from __future__ import annotations

import filecmp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet.inventory_plan import plan_inventory
from pdfleet.paths import REPO_ROOT
from pdfleet.render import render_plan
from plan_support import EXAMPLES, PROFILES

GOLDEN = Path(__file__).parent / "golden"
BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
UPDATE = os.environ.get("PDFLEET_UPDATE_GOLDEN") == "1"


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("profile", PROFILES)
def test_golden(profile: str, tmp_path: Path) -> None:
    render_plan(plan_inventory(EXAMPLES / profile), tmp_path)
    if UPDATE:
        shutil.rmtree(GOLDEN / profile, ignore_errors=True)
        shutil.copytree(tmp_path, GOLDEN / profile)
    assert _tree(tmp_path) == _tree(GOLDEN / profile), (
        f"rendered units differ from tests/plan/golden/{profile}; if the change is intended, "
        "rerun with PDFLEET_UPDATE_GOLDEN=1 and review the diff"
    )


@pytest.mark.parametrize("profile", PROFILES)
def test_rerender_is_byte_stable(profile: str, tmp_path: Path) -> None:
    plan = plan_inventory(EXAMPLES / profile)
    render_plan(plan, tmp_path / "a")
    render_plan(plan_inventory(EXAMPLES / profile), tmp_path / "b")
    cmp = filecmp.dircmp(tmp_path / "a", tmp_path / "b")
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b"), cmp.report()


def test_ansible_template_renders_identically(tmp_path: Path) -> None:
    """The role's template module and `pdfleet render` produce the same bytes for every profile."""
    ours, theirs = tmp_path / "pdfleet", tmp_path / "ansible"
    for profile in PROFILES:
        render_plan(plan_inventory(EXAMPLES / profile), ours / profile)
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         "tests/plan/render_with_ansible.yml", "-e",
         json.dumps({"render_out": str(theirs), "render_profiles": list(PROFILES),
                     "ansible_python_interpreter": sys.executable})],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _tree(theirs) and _tree(ours) == _tree(theirs)


def _fake_root(root: Path, units: list[Path]) -> None:
    """A root with the host's system units and stub executables where ExecStart points."""
    shutil.copytree("/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    (root / "etc/systemd/system").mkdir(parents=True)
    for unit in units:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
        for line in unit.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecStartPre=")):
                exe = root / line.split("=", 1)[1].split()[0].lstrip("/")
                exe.parent.mkdir(parents=True, exist_ok=True)
                exe.write_text("#!/bin/sh\n")
                exe.chmod(0o755)


def _verify(root: Path, name: str) -> str:
    proc = subprocess.run(["systemd-analyze", "verify", f"--root={root}", "--man=no", name],
                          cwd=root / "etc/systemd/system", capture_output=True, text=True, check=False)
    return (proc.stdout + proc.stderr).strip() + ("" if proc.returncode == 0 else f" (rc {proc.returncode})")


needs_systemd_analyze = pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                                           reason="systemd-analyze is not installed (apt install systemd)")


@needs_systemd_analyze
@pytest.mark.parametrize("profile", PROFILES)
def test_systemd_analyze_verify_is_silent(profile: str, tmp_path: Path) -> None:
    render_plan(plan_inventory(EXAMPLES / profile), tmp_path / "out")
    units = sorted((tmp_path / "out").rglob("*.service"))
    assert units
    for unit in units:
        root = tmp_path / "root" / unit.parent.name / unit.stem
        _fake_root(root, [unit])
        assert _verify(root, unit.name) == "", unit


@needs_systemd_analyze
def test_systemd_analyze_check_catches_a_broken_unit(tmp_path: Path) -> None:
    render_plan(plan_inventory(EXAMPLES / "pd-4p4d"), tmp_path / "out")
    unit = tmp_path / "out" / "gpu01" / "pdfleet-prefill0.service"
    unit.write_text(unit.read_text().replace("Restart=on-failure", "Restart=sometimes"))
    _fake_root(tmp_path / "root", [unit])
    assert "Failed to parse service restart specifier" in _verify(tmp_path / "root", unit.name)
