"""The production package and the simulator are two distributions (docs/architecture.md): pdfleet (scripts/pdfleet)
never imports pdfleet_sim (scripts/sim/pdfleet_sim); `pdfleet sim` reaches the simulator only through the
pdfleet.commands entry point that pdfleet-sim declares. The installed-wheel side of this is
tests/lint/test_installed_package.py."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

from pdfleet import cli
from pdfleet.paths import REPO_ROOT

PRODUCTION = REPO_ROOT / "scripts" / "pdfleet"
SIM = REPO_ROOT / "scripts" / "sim"


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_production_package_never_imports_the_simulator() -> None:
    offenders = {str(p.relative_to(REPO_ROOT)): sorted(n for n in _imports(p) if n.split(".")[0] == "pdfleet_sim")
                 for p in sorted(PRODUCTION.rglob("*.py"))}
    assert {k: v for k, v in offenders.items() if v} == {}
    leftovers = [p.name for p in PRODUCTION.iterdir() if p.name in ("sim", "simworker", "testing")]
    assert leftovers == []


def test_pdfleet_sim_declares_the_sim_command_and_is_not_a_dev_extra() -> None:
    sim = tomllib.loads((SIM / "pyproject.toml").read_text())["project"]
    root = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert sim["entry-points"][cli.COMMAND_GROUP] == {"sim": "pdfleet_sim.cli:register"}
    assert f"pdfleet=={root['version']}" in sim["dependencies"] and sim["version"] == root["version"]
    everything = [*root["dependencies"], *(d for ds in root["optional-dependencies"].values() for d in ds)]
    assert not [d for d in everything if d.lower().replace("_", "-").startswith("pdfleet")]


def test_pdfleet_sim_runs_through_the_entry_point() -> None:
    """The checkout (make setup) installs pdfleet-sim: `pdfleet sim` is its command, loaded only when parsed."""
    assert "sim" in cli.plugin_commands()
    code = ("import sys, pdfleet.cli; assert not [m for m in sys.modules if m.startswith('pdfleet_sim')]; "
            "pdfleet.cli.build_parser(); assert 'pdfleet_sim.cli' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    proc = subprocess.run([str(Path(sys.executable).parent / "pdfleet"), "sim", "--help"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0 and "usage: pdfleet sim" in proc.stdout, proc.stdout + proc.stderr
    assert "needs the separate pdfleet-sim" not in proc.stdout


def test_the_packaged_conformance_suite_has_its_runtime_dependencies() -> None:
    """pdfleet conformance runs pytest on pdfleet.conformance_suite from the installed wheel: what the suite imports
    outside the standard library and pdfleet is a runtime dependency, not a dev extra."""
    suite = PRODUCTION / "conformance_suite"
    imported = {n.split(".")[0] for p in suite.glob("*.py") for n in _imports(p)}
    third_party = sorted(imported - set(sys.stdlib_module_names) - {"pdfleet", "__future__"})
    assert third_party == ["pytest", "testinfra"]
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    deps = {d.split("==")[0] for d in project["dependencies"]}
    assert {"pytest", "pytest-testinfra"} <= deps


def test_make_setup_installs_pdfleet_sim_and_follows_its_pyproject() -> None:
    makefile = (REPO_ROOT / "Makefile").read_text()
    rule = makefile.split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    prerequisites = rule.splitlines()[0].split()
    assert "scripts/sim/pyproject.toml" in prerequisites and "pyproject.toml" in prerequisites
    assert "pip install --quiet --no-compile -e . -e scripts/sim" in rule
    # make test and make lint add the dev extra on top (make site needs none of it)
    dev = makefile.split("\n$(DEV_STAMP):", 1)[1].split("\n\n", 1)[0]
    assert dev.splitlines()[0].split() == ["$(STAMP)"]
    assert "pip install --quiet --no-compile -e '.[dev]' -e scripts/sim" in dev
    assert "setup: host-packages $(DEV_STAMP)" in makefile and "\ntest: setup" in makefile
