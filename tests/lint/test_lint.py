"""Static checks that CI must keep green: ruff, ansible-lint (production profile), playbook syntax."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
PLAYBOOKS = sorted(p.name for p in REPO_ROOT.glob("*.yml") if p.name != "execution-environment.yml")  # not a playbook


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)


def test_ruff() -> None:
    proc = _run(str(BIN / "ruff"), "check", ".")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile() -> None:
    proc = _run(str(BIN / "ansible-lint"), "--offline", "--profile", "production", "--nocolor")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_syntax(playbook: str) -> None:
    proc = _run(str(BIN / "ansible-playbook"), "--syntax-check", playbook)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_role_documents_its_arguments() -> None:
    roles = sorted((REPO_ROOT / "ansible" / "roles").iterdir())
    assert roles
    missing = [r.name for r in roles if not (r / "meta" / "argument_specs.yml").is_file()]
    assert not missing, f"roles without meta/argument_specs.yml: {missing}"
