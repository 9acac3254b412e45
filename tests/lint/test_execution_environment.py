"""The AWX / AAP execution environment: ansible-builder 3 turns execution-environment.yml into a build context
that carries the pdfleet package and its Python dependencies."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent


def test_ee_requirements_are_the_projects_runtime_dependencies() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    wanted = sorted(d for d in project if not d.startswith(("ansible==", "ansible-core==")))
    lines = (REPO_ROOT / "ee" / "requirements.txt").read_text().splitlines()
    assert sorted(line for line in lines if line and not line.startswith("#")) == wanted
    core = next(d for d in project if d.startswith("ansible-core=="))
    assert f"package_pip: {core}" in (REPO_ROOT / "execution-environment.yml").read_text()


def test_the_control_machine_gets_the_gateway_of_the_pins() -> None:
    """The rollout's isolated gate starts the pinned gateway on the control machine (pdfleet.fleet.gate), so an
    install of pdfleet alone (the EE's, or pip's) must bring it: a runtime dependency at the pin, not a dev extra."""
    from pdfleet.versions import PINS

    wanted = f"{PINS['sglang_router_package']}=={PINS['sglang_router_version']}"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert wanted in project["dependencies"], (wanted, project["dependencies"])


def test_ansible_builder_creates_a_context_with_the_package(tmp_path: Path) -> None:
    ctx = tmp_path / "context"
    proc = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(ctx),
                           "--output-filename", "Containerfile"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    containerfile = (ctx / "Containerfile").read_text()
    assert "ARG EE_BASE_IMAGE" in containerfile
    assert "COPY _build/pdfleet /opt/pdfleet" in containerfile
    assert "pip install --no-cache-dir --no-deps /opt/pdfleet" in containerfile
    built = ctx / "_build" / "pdfleet"
    for path in ("pyproject.toml", "scripts/pdfleet/cli.py", "scripts/pdfleet/inventory.py",
                 "scripts/pdfleet/templates/worker.service.j2", "scripts/pdfleet/patches/0.5.23/nixl-conn.patch",
                 "ansible/plugins/filter/pdfleet_plan.py", "ansible/roles/sglang/tasks/main.yml"):
        assert (built / path).is_file(), path
    reqs = (ctx / "_build" / "requirements.txt").read_text()
    assert "fabric==3.2.3" in reqs and "pytest-testinfra" in reqs
    assert "community.general" in (ctx / "_build" / "requirements.yml").read_text()


def test_watchdog_role_pins_are_the_projects() -> None:
    """The watchdog's virtualenv repeats a few pins of pyproject.toml (a role must stand alone): kept in step here."""
    import yaml

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    pins = set(project["dependencies"]) | set(project["optional-dependencies"]["dev"])
    defaults = yaml.safe_load((REPO_ROOT / "ansible/roles/pdfleet_watchdog/defaults/main.yml").read_text())
    packages = defaults["pdfleet_watchdog_python_packages"]
    assert packages and set(packages) <= pins, set(packages) - pins
