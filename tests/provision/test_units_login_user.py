"""The pdfleet_units role never takes over a person's account: a service user that exists with a login shell stops
the role before its first change, naming the account. Runs the role on this machine in check mode with root (an
account every machine has, with a login shell) as the service user; the planner refuses root before any play, so
the contexts are edited here to reach the role's own guard."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

from pdfleet.paths import REPO_ROOT, TEMPLATE_DIR
from role_inputs import _plan, plan_inputs

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"


def _run(tmp_path: Path, user: str, secrets: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    contexts = copy.deepcopy(_plan("0.5.15.post1", "/opt/pdfleet/venv")["contexts"]["gpu01"])
    for ctx in contexts:
        ctx["pdfleet_units_service"]["user"] = user
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles:\n"
                    "    - role: pdfleet.cluster.pdfleet_units\n")
    evars = {**plan_inputs("pdfleet_units"), "pdfleet_units_contexts": contexts,
             "pdfleet_units_template_dir": str(TEMPLATE_DIR), "pdfleet_units_remove_unplanned": False,
             "pdfleet_units_start": False, "ansible_python_interpreter": sys.executable,
             "pdfleet_units_secrets": {"PDFLEET_ROUTER_API_KEY": "k3y"} if secrets is None else secrets}
    (tmp_path / "vars.json").write_text(json.dumps(evars))
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--check", str(play),
                           "-e", f"@{tmp_path / 'vars.json'}"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


def test_an_existing_login_account_as_the_service_user_is_refused(tmp_path: Path) -> None:
    proc = _run(tmp_path, "root")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0, out[-3000:]
    assert "localhost: the service user root is an existing login account (shell /bin/bash" in out, out[-3000:]
    assert "changed=0" in out


def test_a_unit_whose_secret_is_missing_is_refused_before_any_change(tmp_path: Path) -> None:
    """The gateway's key is on by default: a host whose router unit reads PDFLEET_ROUTER_API_KEY and an inventory
    without it (or with an empty value, or a newline that would start another line of the env file) stops at the
    role's first task, naming the key and the way to make one."""
    for secrets in ({}, {"PDFLEET_ROUTER_API_KEY": ""}, {"PDFLEET_ROUTER_API_KEY": "a\nEXTRA=1"},
                    {"HF_TOKEN": "not the router's"}):
        proc = _run(tmp_path, "pdfleet", secrets)
        out = " ".join(proc.stdout.split())
        assert proc.returncode != 0, out[-3000:]
        assert "localhost: the units here read PDFLEET_ROUTER_API_KEY from pdfleet_units_secrets" in out, out[-3000:]
        assert "pdfleet keygen NAME | ansible-vault encrypt_string" in out and "ok=1 changed=0" in out, out[-3000:]
