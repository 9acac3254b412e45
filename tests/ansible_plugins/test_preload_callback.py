"""The pdfleet.cluster.pdfleet_preload callback (ansible/plugins/callback): the controller loads the Jinja test and
filter plugins (the collection's by their full names) before the first task, so a task's worker process inherits
them instead of loading them itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pdfleet.paths import REPO_ROOT

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"

# A filter that reports, from inside the task's worker, which Jinja test plugin modules the process holds before
# the task's own template uses any test.
REPORT_FILTER = '''
import sys


def _loaded(_value):
    return sorted(name.split("_")[0] for name in sys.modules if name.startswith("ansible.plugins.test."))


def _ours(_value):
    return sorted(name for name in sys.modules if name.startswith("ansible_collections.pdfleet.cluster.plugins."))


class FilterModule:
    def filters(self):
        return {"test_plugins_loaded": _loaded, "pdfleet_plugins_loaded": _ours}
'''

PLAYBOOK = """\
- name: Report what the worker inherited
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Write the test plugin modules the worker holds
      ansible.builtin.copy:
        content: "{{ {'tests': 'x' | test_plugins_loaded, 'ours': 'x' | pdfleet_plugins_loaded} | to_json }}"
        dest: "{{ playbook_dir }}/loaded.json"
        mode: "0644"
"""


def _loaded_in_worker(tmp_path: Path, callbacks: str | None) -> dict[str, list[str]]:
    (tmp_path / "filter").mkdir(exist_ok=True)
    (tmp_path / "filter" / "report.py").write_text(textwrap.dedent(REPORT_FILTER))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_FILTER_PLUGINS=str(tmp_path / "filter"))
    if callbacks is not None:  # another callback than ansible.cfg's (junit writes its report under tmp_path)
        env.update(ANSIBLE_CALLBACKS_ENABLED=callbacks, JUNIT_OUTPUT_DIR=str(tmp_path / "junit"))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "loaded.json").read_text())


def test_the_worker_inherits_the_test_plugins_the_controller_loaded(tmp_path: Path) -> None:
    # the repository's ansible.cfg enables the callback (pdfleet.cluster.pdfleet_preload): the worker already holds
    # the core tests, and the collection's filters and lookup, loaded by their full names
    loaded = _loaded_in_worker(tmp_path, None)
    assert "ansible.plugins.test.core" in loaded["tests"]
    assert {"ansible_collections.pdfleet.cluster.plugins.filter.pdfleet_plan",
            "ansible_collections.pdfleet.cluster.plugins.filter.pdfleet_units_prune",
            "ansible_collections.pdfleet.cluster.plugins.lookup.pdfleet_template"} <= set(loaded["ours"]), loaded
    # without it the worker holds none until a template of its own uses one
    assert _loaded_in_worker(tmp_path, "ansible.builtin.junit") == {"tests": [], "ours": []}
