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


def _run(tmp_path: Path, user: str) -> subprocess.CompletedProcess[str]:
    contexts = copy.deepcopy(_plan("0.5.15.post1", "/opt/pdfleet/venv")["contexts"]["gpu01"])
    for ctx in contexts:
        ctx["pdfleet_units_service"]["user"] = user
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles:\n"
                    "    - role: pdfleet.cluster.pdfleet_units\n")
    evars = {**plan_inputs("pdfleet_units"), "pdfleet_units_contexts": contexts,
             "pdfleet_units_template_dir": str(TEMPLATE_DIR), "pdfleet_units_remove_unplanned": False,
             "pdfleet_units_start": False, "ansible_python_interpreter": sys.executable}
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
