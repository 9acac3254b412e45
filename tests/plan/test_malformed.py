"""Every malformed inventory fails `pdfleet plan` and the preflight play, each with its own message."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from pdfleet.cli import main
from pdfleet.paths import REPO_ROOT
from plan_support import CATALOGUE, EXAMPLES, write_inventory

ANSIBLE_PLAYBOOK = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin" / "ansible-playbook"


def test_catalogue_is_large_and_messages_are_distinct() -> None:
    assert len(CATALOGUE) >= 15
    expects = [c["expect"] for c in CATALOGUE]
    assert len(set(expects)) == len(expects)


def test_unmodified_base_plans(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = yaml.safe_load((EXAMPLES / "pd-4p4d" / "group_vars" / "all" / "cluster.yml").read_text())
    inv = write_inventory(tmp_path / "base", base["pdfleet_cluster"])
    assert main(["plan", "-i", str(inv)]) == 0
    assert "pdfleet-prefill0" in capsys.readouterr().out


def test_plan_rejects(malformed: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    inventory, expect = malformed
    assert main(["plan", "-i", str(inventory)]) == 2
    err = capsys.readouterr().err
    assert expect in err
    assert "problem(s) in the inventory model" in err
    # Other cases' messages do not leak into this one: the message is specific to the fault.
    others = [c["expect"] for c in CATALOGUE if c["expect"] != expect]
    assert not [o for o in others if o in err]


def test_preflight_rejects_before_touching_hosts(malformed: tuple[Path, str]) -> None:
    inventory, expect = malformed
    env = dict(os.environ, ANSIBLE_CALLBACK_RESULT_FORMAT="json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "site.yml"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert expect in out, out
    assert "Preflight | plan the cluster" in out
    assert "Deploy | " not in out  # no play after preflight ran
    assert "UNREACHABLE" not in out and "changed=0" in out  # no connection attempted, nothing changed
