"""pdfleet installed as a normal wheel (not editable), the way the execution environment installs it: its
ansible-builder context's `pip install --no-deps /opt/pdfleet` run in a fresh virtualenv outside the checkout.
The installed package must plan and render every example inventory to the same bytes as the checkout (its
templates, patches and launch-check store are package data)."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT

BIN = Path(sys.executable).parent
EXAMPLES = sorted(p for p in (REPO_ROOT / "inventory" / "examples").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh venv with pdfleet installed from the EE's build context; the environment that runs it (its
    dependencies from this venv's site-packages, whose editable pdfleet is not on the path: .pth files there are
    not read)."""
    root = tmp_path_factory.mktemp("installed")
    ctx = root / "context"
    proc = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", "execution-environment.yml", "-c", str(ctx),
                           "--output-filename", "Containerfile"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pip install --no-cache-dir --no-deps /opt/pdfleet" in (ctx / "Containerfile").read_text()
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    # the EE's install step, on the context's copy of the project (COPY _build/pdfleet /opt/pdfleet)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-cache-dir",
                           "--no-deps", str(ctx / "_build" / "pdfleet")], cwd=root, capture_output=True, text=True,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    yield venv, env


def _run(cmd: list[str], env: dict[str, str] | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{' '.join(cmd)}: rc {proc.returncode}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}"
    return proc


def test_the_installed_package_is_a_copy_with_its_data(installed: tuple[Path, dict[str, str]],
                                                       tmp_path: Path) -> None:
    venv, env = installed
    code = ("import pdfleet, pdfleet.paths as p; print(pdfleet.__file__); print(p.CHECKOUT); "
            "print(sorted(x.name for x in p.TEMPLATE_DIR.iterdir())); "
            "print(sorted(x.name for x in p.PATCH_DIR.iterdir()))")
    lines = _run([str(venv / "bin" / "python"), "-c", code], env, tmp_path).stdout.splitlines()
    assert lines[0].startswith(str(venv)), lines  # not the checkout's editable package
    assert lines[1] == "None"
    assert lines[2] == str(sorted(x.name for x in (REPO_ROOT / "scripts/pdfleet/templates").iterdir()))
    assert lines[3] == str(sorted(x.name for x in (REPO_ROOT / "scripts/pdfleet/patches").iterdir()))


@pytest.mark.parametrize("inventory", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_the_installed_package_plans_and_renders_as_the_checkout(installed: tuple[Path, dict[str, str]],
                                                                 inventory: Path, tmp_path: Path) -> None:
    venv, env = installed
    outside, checkout = tmp_path / "outside", tmp_path / "checkout"
    outside.mkdir()
    wheel_plan = _run([str(venv / "bin" / "pdfleet"), "plan", "--json", "-i", str(inventory)], env, outside).stdout
    repo_plan = _run([str(BIN / "pdfleet"), "plan", "--json", "-i", str(inventory)], None, REPO_ROOT).stdout
    assert wheel_plan == repo_plan
    _run([str(venv / "bin" / "pdfleet"), "render", "-i", str(inventory), "-o", str(outside / "units")], env, outside)
    _run([str(BIN / "pdfleet"), "render", "-i", str(inventory), "-o", str(checkout)], None, REPO_ROOT)
    wheel_files = sorted(p.relative_to(outside / "units") for p in (outside / "units").rglob("*") if p.is_file())
    repo_files = sorted(p.relative_to(checkout) for p in checkout.rglob("*") if p.is_file())
    assert wheel_files == repo_files and wheel_files
    _, mismatch, errors = filecmp.cmpfiles(outside / "units", checkout, [str(p) for p in repo_files], shallow=False)
    assert mismatch == [] and errors == []
