"""Role probes (``ansible/roles/<role>/files/probe.py``) as tests use them: run whole, as the pdfleet_probe action
sends them to a host, or loaded as a module so their pure ``differs(cfg, found)`` can be called directly."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from pdfleet.paths import REPO_ROOT

ROLES = REPO_ROOT / "ansible" / "roles"
ACTION = REPO_ROOT / "ansible" / "plugins" / "action" / "pdfleet_probe.py"
COMMON = REPO_ROOT / "ansible" / "plugins" / "module_utils" / "pdfleet_probe_common.py"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def action() -> ModuleType:
    """The pdfleet_probe action plugin's module (its remote_program builds what a host runs)."""
    return _load("pdfleet_probe_action", ACTION)


def run_probe(role: str, settings: dict, env: dict[str, str] | None = None) -> dict:
    """The role's probe run whole in a child interpreter, as a host runs it: settings on stdin, JSON out."""
    source = (ROLES / role / "files" / "probe.py").read_text()
    program = action().remote_program(source, "probe.py")
    proc = subprocess.run([sys.executable, "-I", "-c", program], input=json.dumps(settings) + "\n",
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def load_common() -> ModuleType:
    """pdfleet_probe_common itself (what every probe imports)."""
    return _load("pdfleet_probe_common", COMMON)


def load_probe(role: str) -> ModuleType:
    """The role's probe as a module (its main() runs only as __main__), with pdfleet_probe_common importable."""
    _load("pdfleet_probe_common", COMMON)
    return _load(f"pdfleet_probe_{role}", ROLES / role / "files" / "probe.py")


def fake_systemctl(bin_dir: Path, unit: str, started: int, enabled: str = "enabled") -> None:
    """A `systemctl` (put first on PATH) whose `show` answers for one active unit that entered the active state at
    ``started`` (epoch seconds)."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "systemctl"
    script.write_text("#!/bin/sh\n"
                      f"printf 'Id={unit}\\nUnitFileState={enabled}\\nActiveState=active\\n"
                      f"ActiveEnterTimestamp=@{started}\\n'\n")
    script.chmod(0o755)


def change_account(found: dict, change: str) -> bool:
    """Apply a change of the service account to a probe's findings: "group missing", "user missing" or
    "user KEY VALUE" (groups as a comma list). False when ``change`` is none of these."""
    if change == "group missing":
        found["group"] = None
    elif change == "user missing":
        found["user"] = None
    elif change.startswith("user "):
        key, value = change.split()[1:]
        found["user"][key] = value.split(",") if key == "groups" else value
    else:
        return False
    return True
