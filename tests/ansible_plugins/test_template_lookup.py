"""The pdfleet_template lookup renders byte for byte what the builtin template lookup (and so the template module)
renders: the roles compare its sha256 with the files on the hosts, so any difference would rewrite them on every
run. Checked on a template with every Jinja setting that matters and on the units' real templates and contexts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pdfleet.paths import REPO_ROOT, TEMPLATE_DIR

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"

# trim_blocks, a kept trailing newline, backslashes and quotes as written, ansible_managed, the template variables,
# template_vars, and a variable the task has (not only the template_vars)
SYNTHETIC = """\
{{ ansible_managed | comment }}
name={{ template_path | basename }}
{% for x in items %}
item {{ x }} \\n \\\\ "quoted" 'single'
{% endfor %}
extra={{ extra_var }} plan_keys={{ big | length }}

"""

PLAYBOOK = """\
- name: Render each template with both lookups
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    items: [a, b]
    big: "{{ range(300) | list }}"
  tasks:
    - name: Render
      ansible.builtin.set_fact:
        rendered: >-
          {{ rendered | default([]) + [{
               'name': item.tpl | basename,
               'builtin': lookup('ansible.builtin.template', item.tpl, template_vars=item.vars),
               'ours': lookup('pdfleet.cluster.pdfleet_template', item.tpl, template_vars=item.vars)}] }}
      loop: "{{ cases }}"
      loop_control:
        label: "{{ item.tpl | basename }}"
    - name: Results
      ansible.builtin.copy:
        content: "{{ rendered | to_json }}"
        dest: "{{ playbook_dir }}/results.json"
        mode: "0644"
"""


def _plan_contexts() -> list[dict[str, Any]]:
    proc = subprocess.run([str(BIN / "pdfleet"), "plan", "-i", str(REPO_ROOT / "inventory" / "sim-fleet"), "--json"],
                          capture_output=True, text=True, timeout=120, check=True)
    plan = json.loads(proc.stdout)
    return [ctx for host in sorted(plan["contexts"]) for ctx in plan["contexts"][host]]


def test_pdfleet_template_renders_what_the_builtin_template_lookup_renders(tmp_path: Path) -> None:
    (tmp_path / "synthetic.j2").write_text(SYNTHETIC)
    cases: list[dict[str, Any]] = [{"tpl": str(tmp_path / "synthetic.j2"), "vars": {"extra_var": "x\\y"}}]
    contexts = _plan_contexts()
    assert {c["pdfleet_units_unit"]["kind"] for c in contexts} == {"router", "worker"}
    for ctx in contexts:
        tv = {"pdfleet_units_unit": ctx["pdfleet_units_unit"], "pdfleet_units_service": ctx["pdfleet_units_service"]}
        for name in ("unit.env.j2", f"{ctx['pdfleet_units_unit']['kind']}.service.j2"):
            cases.append({"tpl": str(TEMPLATE_DIR / name), "vars": tv})
    router = next(c["pdfleet_units_unit"] for c in contexts if c["pdfleet_units_unit"]["kind"] == "router")
    cases.append({"tpl": str(TEMPLATE_DIR / "secrets.env.j2"), "vars": {"pdfleet_units_unit": router}})
    (tmp_path / "cases.json").write_text(json.dumps({"cases": cases,
                                                     "pdfleet_units_secrets": {"PDFLEET_ROUTER_API_KEY": "t0k\\en",
                                                                               "HF_TOKEN": "not-the-router's"}}))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", "-e", f"@{tmp_path / 'cases.json'}",
                           str(tmp_path / "play.yml")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert len(results) == len(cases)
    for r in results:
        assert r["ours"] == r["builtin"], r["name"]
    synthetic = results[0]["ours"]
    assert synthetic.endswith("plan_keys=300\n\n") and "item a \\n \\\\ \"quoted\"" in synthetic
    assert synthetic.startswith("#\n# Ansible managed\n#\nname=synthetic.j2\n")


def test_pdfleet_template_names_a_missing_template(tmp_path: Path) -> None:
    (tmp_path / "play.yml").write_text("""\
- name: Missing
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Render a template that is not there
      ansible.builtin.debug:
        msg: "{{ lookup('pdfleet.cluster.pdfleet_template', 'no-such.j2') }}"
""")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-e",
                           f"ansible_python_interpreter={sys.executable}", str(tmp_path / "play.yml")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "pdfleet_template: no template 'no-such.j2'" in proc.stdout + proc.stderr
