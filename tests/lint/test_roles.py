"""Roles that stand alone: no role notifies another role's handler, every role has a README and
`ansible-doc -t role` prints it, the filter plugin stays light, and the shared constants live in one file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest
import role_readmes
import yaml
from pdfleet import versions
from pdfleet.paths import REPO_ROOT

BIN = Path(os.environ.get("VIRTUAL_ENV", REPO_ROOT / ".venv")) / "bin"
ROLES_DIR = REPO_ROOT / "ansible" / "roles"
ROLES = sorted(r.name for r in ROLES_DIR.iterdir() if r.is_dir())


def _tasks(role: Path) -> list[dict]:
    out: list[dict] = []

    def walk(items: object) -> None:
        for item in items or []:
            if isinstance(item, dict):
                out.append(item)
                for key in ("block", "rescue", "always"):
                    walk(item.get(key))

    for f in sorted((role / "tasks").glob("*.yml")) + sorted((role / "handlers").glob("*.yml")):
        walk(yaml.safe_load(f.read_text()))
    return out


def _handler_names(role: Path) -> set[str]:
    names: set[str] = set()
    for f in sorted((role / "handlers").glob("*.yml")):
        for h in yaml.safe_load(f.read_text()) or []:
            names.add(h["name"])
            listen = h.get("listen", [])
            names.update([listen] if isinstance(listen, str) else listen)
    return names


def notify_violations(roles_dir: Path) -> list[str]:
    """'role: notifies <name> of role <other>' for each notify that names only another role's handler."""
    own = {r.name: _handler_names(r) for r in roles_dir.iterdir() if r.is_dir()}
    bad = []
    for role in sorted(own):
        for task in _tasks(roles_dir / role):
            notify = task.get("notify", [])
            for name in [notify] if isinstance(notify, str) else notify:
                if name in own[role]:
                    continue
                owners = sorted(r for r, names in own.items() if name in names)
                bad.append(f"{role}: notifies '{name}' of role(s) {owners or 'none'}")
    return bad


def test_no_role_notifies_another_roles_handler() -> None:
    assert notify_violations(ROLES_DIR) == []


def test_the_notify_check_catches_a_cross_role_notify(tmp_path: Path) -> None:
    for role, tasks, handlers in (("a", [{"name": "t", "ansible.builtin.debug": {}, "notify": "Restart b"}], []),
                                  ("b", [], [{"name": "Restart b", "ansible.builtin.debug": {}}])):
        (tmp_path / role / "tasks").mkdir(parents=True)
        (tmp_path / role / "handlers").mkdir()
        (tmp_path / role / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks))
        (tmp_path / role / "handlers" / "main.yml").write_text(yaml.safe_dump(handlers))
    assert notify_violations(tmp_path) == ["a: notifies 'Restart b' of role(s) ['b']"]


@pytest.mark.parametrize("role", ROLES)
def test_role_has_a_readme_and_ansible_doc_prints_it(role: str) -> None:
    assert (ROLES_DIR / role / "README.md").is_file()
    proc = subprocess.run([str(BIN / "ansible-doc"), "-t", "role", "-r", str(ROLES_DIR), role], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "ENTRY POINT:" in proc.stdout, proc.stdout + proc.stderr


def test_filter_plugin_does_not_import_the_heavy_runtime() -> None:
    code = ("import sys; sys.path.insert(0, 'ansible/plugins/filter'); import pdfleet_plan; "
            "print(','.join(sorted(m for m in sys.modules if m.startswith('pdfleet'))))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "pdfleet.patch.runtime" not in proc.stdout.split(","), proc.stdout


def test_shared_constants_are_written_once() -> None:
    """The values of constants.yml appear in no role's tasks, defaults or vars (comments and docs aside): the roles
    take them as inputs from the plan."""
    needles = [versions.RECORD_NAME, versions.MODEL_MANIFEST_NAME, versions.PINS["nixl_version"],
               versions.PINS["cuda_driver_version"], versions.PINS["sglang_router_version"], "ud_v, ud_x",
               "cuda_copy, cuda_ipc, gdr_copy", "constants.yml",
               *(p.pattern for p in versions.DRIVER_HOLD_REGEX.values())]

    def code(f: Path) -> str:
        lines = f.read_text().splitlines()
        return "\n".join(line.split(" #")[0] for line in lines if not line.lstrip().startswith("#"))

    files = [f for f in sorted(ROLES_DIR.rglob("*.yml")) if "meta" not in f.parts]
    found = [f"{f.relative_to(REPO_ROOT)}: {n}" for f in files for n in needles if n in code(f)]
    assert found == []


def _python_strings(f: Path) -> list[tuple[int, str]]:
    """The string literals of a Python file that are code (docstrings, which stand alone as a statement, aside)."""
    out: list[tuple[int, str]] = []
    prev = tokenize.NEWLINE
    with f.open("rb") as fh:
        for tok in tokenize.tokenize(fh.readline):
            if tok.type == tokenize.STRING and prev not in (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                                                            tokenize.NL, tokenize.ENCODING):
                out.append((tok.start[0], tok.string))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                prev = tok.type
    return out


def crossings(root: Path) -> list[str]:
    """'file:line: text' for each place where Ansible reads the Python package's folder (scripts/) or Python reads
    the roles' folder (ansible/roles): the plan is the only channel between them (comments and docstrings aside)."""
    found = []
    yaml_pattern = re.compile(r"scripts/|\.\./\.\./\.\./")
    for f in sorted(p for g in ("*.yml", "*.yaml", "*.j2", "*.py") for p in (root / "ansible").rglob(g)):
        if f.suffix == ".py":
            hits = [(n, text) for n, text in _python_strings(f) if yaml_pattern.search(text)]
        else:
            hits = [(n, line.strip()) for n, line in enumerate(f.read_text().splitlines(), 1)
                    if not line.lstrip().startswith("#") and yaml_pattern.search(line.split(" #")[0])]
        found += [f"{f.relative_to(root)}:{n}: {text}" for n, text in hits]
    joined = re.compile(r"[\"']ansible[\"']\s*/\s*[\"']roles[\"']")  # REPO_ROOT / "ansible" / "roles"
    for f in sorted((root / "scripts").rglob("*.py")):
        lines = f.read_text().splitlines()
        found += [f"{f.relative_to(root)}:{n}: {text}" for n, text in _python_strings(f) if "ansible/roles" in text]
        found += [f"{f.relative_to(root)}:{n}: {line.strip()}" for n, line in enumerate(lines, 1)
                  if joined.search(line.split(" #")[0])]
    return found


def test_ansible_and_python_meet_only_through_the_plan() -> None:
    assert crossings(REPO_ROOT) == []


def test_the_crossing_check_catches_a_role_reading_the_package(tmp_path: Path) -> None:
    (tmp_path / "ansible" / "roles" / "r" / "vars").mkdir(parents=True)
    (tmp_path / "scripts" / "pdfleet").mkdir(parents=True)
    (tmp_path / "ansible" / "roles" / "r" / "vars" / "main.yml").write_text(
        "# scripts/ in a comment is fine\nx: \"{{ lookup('file', role_path ~ '/../../../scripts/pdfleet/c.yml') }}\"\n")
    (tmp_path / "scripts" / "pdfleet" / "m.py").write_text(
        '"""Docs may name ansible/roles."""\nP = ROOT / "ansible" / "roles" / "sglang"\n')
    assert crossings(tmp_path) == [
        "ansible/roles/r/vars/main.yml:2: x: \"{{ lookup('file', role_path ~ '/../../../scripts/pdfleet/c.yml') }}\"",
        'scripts/pdfleet/m.py:2: P = ROOT / "ansible" / "roles" / "sglang"']


@pytest.mark.parametrize("role", ROLES)
def test_role_readme_lists_the_inputs_of_its_argument_specs(role: str) -> None:
    """Run tests/lint/role_readmes.py to rewrite the tables after changing a role's meta/argument_specs.yml."""
    readme = ROLES_DIR / role / "README.md"
    assert readme.read_text() == role_readmes.rendered(ROLES_DIR / role), (
        f"{readme}: its inputs table differs from meta/argument_specs.yml; run .venv/bin/python "
        "tests/lint/role_readmes.py")
