"""The wheel play (ansible/playbooks/wheel.yml, control machine only: it builds into .cache/ and contacts no host)
hands the sim workers both wheels and the watchdog only the production one; a second run builds nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent


def _run(tmp_path: Path, name: str) -> tuple[dict, str]:
    out = tmp_path / f"{name}.json"
    play = tmp_path / f"{name}.yml"
    play.write_text(f"""\
- import_playbook: {REPO_ROOT / "ansible" / "playbooks" / "wheel.yml"}
- name: Write what the wheel play handed over
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Write the facts
      ansible.builtin.copy:
        dest: {out}
        content: "{{{{ {{'pdfleet_wheel': pdfleet_wheel, 'pdfleet_sim_wheels': pdfleet_sim_wheels}} | to_json }}}}"
        mode: "0644"
""")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(play)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "ANSIBLE_PYTHON_INTERPRETER": sys.executable})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    recap = next(line for line in proc.stdout.splitlines() if line.startswith("localhost"))
    return json.loads(out.read_text()), recap


def _packages(wheel: str) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n.split("/")[0] for n in zf.namelist() if not n.split("/")[0].endswith(".dist-info")}


def test_the_wheel_play_hands_both_wheels_to_the_sim_and_one_to_the_watchdog(tmp_path: Path) -> None:
    _run(tmp_path, "first")  # builds when the sources changed since the last run
    facts, recap = _run(tmp_path, "second")
    # cached by source hash: nothing rebuilt, the one change is this test's own facts file
    assert "changed=1" in recap, recap
    assert [w["built"] for w in facts["pdfleet_sim_wheels"]] == [False, False]
    watchdog, sim = facts["pdfleet_wheel"], facts["pdfleet_sim_wheels"]
    assert _packages(watchdog["path"]) == {"pdfleet"}
    assert [_packages(w["path"]) for w in sim] == [{"pdfleet"}, {"pdfleet_sim"}]
    assert sim[0] == watchdog
    assert all(len(w["sha256"]) == 64 for w in sim)
