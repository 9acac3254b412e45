"""`pdfleet ops` takes the inventory flags of every pdfleet command (as ansible-playbook's): an inventory whose
cluster file is Vault-encrypted plans with --vault-password-file, and without it the error names the Vault
(issue 30: ops had no vault flags, yet its error told the user to pass one)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent


def _vaulted_example(tmp_path: Path) -> tuple[Path, Path]:
    inv = tmp_path / "inv"
    shutil.copytree(REPO_ROOT / "inventory" / "examples" / "pd-4p4d", inv)
    password = tmp_path / "vault-pass"
    password.write_text("correct horse\n")
    password.chmod(0o600)
    cluster = inv / "group_vars" / "all" / "cluster.yml"
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password), str(cluster)],
                   check=True, capture_output=True, timeout=120)
    assert cluster.read_bytes().startswith(b"$ANSIBLE_VAULT")
    return inv, password


def _ops(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "pdfleet"), "ops", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False)


def test_ops_plans_a_vaulted_inventory_with_the_vault_flags(tmp_path: Path) -> None:
    inv, password = _vaulted_example(tmp_path)
    opened = _ops("drain", "nosuchhost", "-i", str(inv), "--vault-password-file", str(password))
    assert opened.returncode == 2 and "no pair on host 'nosuchhost' (pairs: gpu01)" in opened.stderr, opened.stderr
    closed = _ops("drain", "nosuchhost", "-i", str(inv))
    assert closed.returncode == 2 and "no pair on host" not in closed.stderr
    assert "vault" in closed.stderr.lower(), closed.stderr
