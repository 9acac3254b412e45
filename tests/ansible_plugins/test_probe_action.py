"""The pdfleet_probe action: a probe script's JSON in one round trip, settings on stdin, errors named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from pdfleet.paths import REPO_ROOT

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"

PROBES = {
    "echo.py": """\
        from __future__ import annotations

        import json
        import sys

        cfg = json.loads(sys.stdin.readline())
        print("noise on stderr", file=sys.stderr)
        print(json.dumps({"got": cfg, "argv": sys.argv[1:], "rest": sys.stdin.read()}))
        """,
    "fails.py": "import sys\nprint('the disk is on fire', file=sys.stderr)\nsys.exit(3)\n",
    "notjson.py": "print('hello')\n",
}

PLAYBOOK = """\
- name: Probe the control machine
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Echo
      pdfleet.cluster.pdfleet_probe:
        src: echo.py
        settings: {path: "/etc/it's here", n: 3, nested: {a: [1, 2]}}
      register: echo
    - name: Fails
      pdfleet.cluster.pdfleet_probe: {src: fails.py}
      register: fails
      ignore_errors: true
    - name: Not JSON
      pdfleet.cluster.pdfleet_probe: {src: notjson.py}
      register: notjson
      ignore_errors: true
    - name: Unknown argument
      pdfleet.cluster.pdfleet_probe: {src: echo.py, setings: {}}
      register: unknown
      ignore_errors: true
    - name: Missing file
      pdfleet.cluster.pdfleet_probe: {src: nowhere.py}
      register: missing
      ignore_errors: true
    - name: Results
      ansible.builtin.copy:
        content: "{{ {'echo': echo, 'fails': fails, 'notjson': notjson, 'unknown': unknown,
                      'missing': missing} | to_json }}"
        dest: "{{ playbook_dir }}/results.json"
        mode: "0644"
      check_mode: false
"""


def _run(tmp_path: Path, *extra: str) -> dict[str, Any]:
    (tmp_path / "files").mkdir(exist_ok=True)
    for name, text in PROBES.items():
        (tmp_path / "files" / name).write_text(textwrap.dedent(text))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml"), *extra],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "results.json").read_text())


def test_probe_returns_the_scripts_json_with_settings_on_stdin(tmp_path: Path) -> None:
    r = _run(tmp_path)
    echo = r["echo"]
    assert echo["changed"] is False and not echo.get("failed")
    # settings arrive intact (quotes included), nothing on argv, stdin holds nothing else; stderr noise is ignored
    assert echo["probe"] == {"got": {"path": "/etc/it's here", "n": 3, "nested": {"a": [1, 2]}}, "argv": [],
                             "rest": ""}


def test_probe_failures_name_the_script_the_host_and_the_cause(tmp_path: Path) -> None:
    r = _run(tmp_path)
    assert r["fails"]["failed"] and r["fails"]["rc"] == 3
    assert "fails.py on localhost exited 3" in r["fails"]["msg"] and "the disk is on fire" in r["fails"]["msg"]
    assert r["notjson"]["failed"] and "notjson.py on localhost printed no JSON document" in r["notjson"]["msg"]
    assert "probe" not in r["notjson"]
    assert r["unknown"]["failed"] and "unknown argument(s) setings" in r["unknown"]["msg"]
    assert r["missing"]["failed"] and "nowhere.py" in r["missing"]["msg"]


def test_probe_runs_in_check_mode(tmp_path: Path) -> None:
    """A read-only look: check mode needs what it found to say what would change."""
    r = _run(tmp_path, "--check")
    assert r["echo"]["probe"]["got"]["n"] == 3
