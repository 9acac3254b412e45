"""The pdfleet_phases callback (enabled in ansible.cfg): after the recap, each play's wall time in the order the
plays ran, and the total (what `make site` prints per phase)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from pdfleet.paths import REPO_ROOT


def test_each_play_and_the_total_are_printed_after_the_recap(tmp_path: Path) -> None:
    plays = [{"name": name, "hosts": "localhost", "connection": "local", "gather_facts": False,
              "tasks": [{"name": "work", "ansible.builtin.pause": {"seconds": seconds}}]}
             for name, seconds in (("Phase one", 1), ("Phase two", 0))]
    (tmp_path / "play.yml").write_text(json.dumps(plays))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    tail = proc.stdout.split("PLAY RECAP", 1)[1]
    lines = tail.split("pdfleet: time per play\n", 1)[1].splitlines()
    found = [re.match(r"^  (.+?)\s+(\d+\.\d) s$", line) for line in lines[:3]]
    assert all(found), lines
    assert [m.group(1) for m in found] == ["Phase one", "Phase two", "total"]  # type: ignore[union-attr]
    one, two, total = (float(m.group(2)) for m in found)  # type: ignore[union-attr]
    assert one >= 1.0 and total >= one + two


def test_machine_readable_output_is_left_alone(tmp_path: Path) -> None:
    play = [{"name": "Only", "hosts": "localhost", "connection": "local", "gather_facts": False,
             "tasks": [{"name": "noop", "ansible.builtin.debug": {"msg": "x"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml")], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and json.loads(proc.stdout)["stats"]["localhost"]["failures"] == 0
