"""The sglang role refuses a host whose Python cannot install the pin, after its look and before any change, with
a real other CPython on this machine as the host's interpreter (sglang_python): both the provision play's entry
point (tasks_from: python) and the role's own checks (main), which name every problem in one task."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from otherpython import other_python
from pdfleet.paths import REPO_ROOT
from role_inputs import plan_inputs

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"


PY310 = other_python("10")


def _play(tmp_path: Path, body: str, **role_vars: object) -> subprocess.CompletedProcess[str]:
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: The sglang role against the control machine
          hosts: localhost
          connection: local
          gather_facts: false
          tasks:
        """) + textwrap.indent(textwrap.dedent(body), " " * 4))
    extra = ["-e", json.dumps(role_vars)]
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", *extra, str(play)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)


ENTRY = """\
    - name: The python entry point
      ansible.builtin.import_role:
        name: pdfleet.cluster.sglang
        tasks_from: python
    """
MAIN = """\
    - name: The whole role
      ansible.builtin.import_role:
        name: pdfleet.cluster.sglang
    """


@pytest.mark.skipif(PY310 is None, reason="no CPython 3.10 on this machine")
@pytest.mark.parametrize("body", [ENTRY, MAIN], ids=["provision-entry-point", "role-main"])
def test_a_python_the_pin_has_no_wheel_for_is_refused_before_any_change(tmp_path: Path, body: str) -> None:
    venv = tmp_path / "venv"
    inputs = {**plan_inputs("sglang", "0.5.23", venv=str(venv)), "sglang_python": str(PY310),
              "sglang_venv": str(venv), "sglang_runtime_path": str(tmp_path / "runtime")}
    proc = _play(tmp_path, body, **inputs)
    assert proc.returncode != 0, proc.stdout[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", proc.stdout), proc.stdout[-3000:]
    assert not venv.exists()
    failure = next(line for line in proc.stdout.splitlines() if "cannot install SGLang" in line)
    assert f"localhost: Python 3.10 (sglang_python {PY310}, glibc " in failure
    assert ("cannot install SGLang 0.5.23 (pypi mode): sglang==0.5.23 has wheels for Python 3.11, 3.12, 3.13 only"
            in failure)
    assert "Pins that would install there: 0.5.15.post1" in failure


def test_the_pins_python_passes_the_check(tmp_path: Path) -> None:
    proc = _play(tmp_path, ENTRY, sglang_version="0.5.23", sglang_python=sys.executable,  # the entry point's inputs
                 sglang_venv=str(tmp_path / "venv"))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s+unreachable=0\s+failed=0", proc.stdout), proc.stdout[-3000:]


def _probe(settings: dict) -> dict:
    """The sglang role's look, run as the pdfleet_probe action sends it."""
    spec = importlib.util.spec_from_file_location("pdfleet_probe_action",
                                                  REPO_ROOT / "ansible/plugins/action/pdfleet_probe.py")
    assert spec and spec.loader
    action = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(action)
    program = action.remote_program((REPO_ROOT / "ansible/roles/sglang/files/probe.py").read_text(), "probe.py")
    proc = subprocess.run([sys.executable, "-I", "-c", program], input=json.dumps(settings) + "\n",
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)["python"]


def test_the_look_reports_the_venvs_python_once_it_exists_and_the_runtimes(tmp_path: Path) -> None:
    venv, runtime = tmp_path / "venv", tmp_path / "runtime"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    (runtime / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    settings = {"venv": str(venv), "conn_file": "conn.py", "python": "/nonexistent/python3", "runtime": str(runtime)}
    look = _probe(settings)
    assert (look["python"], look["python_from"], look["runtime_python"]) == ("3.12", f"the service venv {venv}", "3.11")
    assert re.fullmatch(r"2\.\d+", look["glibc"]), look
    shutil.rmtree(venv)  # no venv yet: the interpreter that will make it answers, or its error is reported
    look = _probe(settings)
    assert look["python"] == "" and "/nonexistent/python3" in look["python_error"], look
