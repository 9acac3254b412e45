"""Roles that stand alone: no role notifies another role's handler, every role has a README and
`ansible-doc -t role` prints it, the filter plugin stays light, and the shared constants live in one file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
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
    """The values of constants.yml appear in no role's tasks, defaults or vars (comments and docs aside)."""
    needles = [versions.RECORD_NAME, versions.MODEL_MANIFEST_NAME, versions.PINS["nixl_version"],
               versions.PINS["cuda_driver_version"], versions.PINS["sglang_router_version"], "ud_v, ud_x",
               "cuda_copy, cuda_ipc, gdr_copy",
               *(p.pattern for p in versions.DRIVER_HOLD_REGEX.values())]

    def code(f: Path) -> str:
        lines = f.read_text().splitlines()
        return "\n".join(line.split(" #")[0] for line in lines if not line.lstrip().startswith("#"))

    files = [f for f in sorted(ROLES_DIR.rglob("*.yml")) if "meta" not in f.parts]
    found = [f"{f.relative_to(REPO_ROOT)}: {n}" for f in files for n in needles if n in code(f)]
    assert found == []
