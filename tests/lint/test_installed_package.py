"""pdfleet installed as a normal wheel (not editable), the way the execution environment installs it: its
ansible-builder context's `pip install --no-deps /opt/pdfleet` run in a fresh virtualenv outside the checkout.
The installed package must plan and render every example inventory to the same bytes as the checkout (its
templates, patches and launch-check store are package data). It carries nothing of the simulator: no
pdfleet.sim/simworker/testing, and `pdfleet sim` says it needs the separate pdfleet-sim distribution; the
conformance suite is package code and runs from the wheel. The pdfleet-sim wheel (pdfleet_sim.wheel, as the sim
hosts get it) installs next to a pdfleet wheel with --no-deps and brings `pdfleet sim` back."""

from __future__ import annotations

import filecmp
import json
import os
import re
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
    yield venv, _dependencies_env(root)


def _dependencies_env(root: Path) -> dict[str, str]:
    """An environment whose PYTHONPATH has this venv's installed dependencies but none of pdfleet's own
    distributions: a view of its site-packages without the editable pdfleet and pdfleet-sim (their dist-info
    would announce entry points, e.g. `pdfleet sim`, whose code is not on that path)."""
    view = root / "deps"
    view.mkdir()
    purelib = Path(sysconfig.get_paths()["purelib"])
    for entry in purelib.iterdir():
        if not re.match(r"(__editable__[._])?pdfleet", entry.name, re.IGNORECASE):
            (view / entry.name).symlink_to(entry)
    return {**os.environ, "PYTHONPATH": str(view)}


@pytest.fixture(scope="module")
def installed_with_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh venv with the two wheels the sim hosts get (python -m pdfleet_sim.wheel), each with --no-deps."""
    root = tmp_path_factory.mktemp("installed-sim")
    proc = subprocess.run([sys.executable, "-m", "pdfleet_sim.wheel", "--json", "--cache-dir", str(root / "wheels")],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wheels = json.loads(proc.stdout)
    assert list(wheels) == ["pdfleet", "pdfleet-sim"]
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-cache-dir",
                           "--no-deps", *(w["path"] for w in wheels.values())], cwd=root, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    yield venv, _dependencies_env(root)


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


def test_the_installed_package_has_no_simulator(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = installed
    code = ("import importlib.util as u, importlib.metadata as m; "
            "print([n for n in ('pdfleet.sim', 'pdfleet.simworker', 'pdfleet.testing', 'pdfleet_sim') "
            "if u.find_spec(n) is not None]); "
            "print(sorted(e.name for e in m.entry_points(group='pdfleet.commands')))")
    lines = _run([str(venv / "bin" / "python"), "-c", code], env, tmp_path).stdout.splitlines()
    assert lines == ["[]", "[]"]
    site = next((venv / "lib").glob("python3*/site-packages"))
    assert sorted(p.name for p in (site / "pdfleet").iterdir() if p.name.startswith(("sim", "testing"))) == []
    for args in (["sim", "up"], ["sim", "--help"], ["sim"]):
        proc = subprocess.run([str(venv / "bin" / "pdfleet"), *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 2, (args, proc.stdout + proc.stderr)
        assert "separate pdfleet-sim distribution" in proc.stderr and "make setup" in proc.stderr, proc.stderr
        assert proc.stdout == ""


def test_the_installed_package_runs_its_own_conformance_suite(installed: tuple[Path, dict[str, str]],
                                                              tmp_path: Path) -> None:
    venv, env = installed
    help_text = _run([str(venv / "bin" / "pdfleet"), "conformance", "--help"], env, tmp_path).stdout
    assert "pytest" in help_text
    out = _run([str(venv / "bin" / "pdfleet"), "conformance", "-i", str(REPO_ROOT / "inventory" / "sim"), "--",
                "--collect-only"], env, tmp_path).stdout
    site = next((venv / "lib").glob("python3*/site-packages"))
    ids = [line for line in out.splitlines() if "::" in line]
    # the installed copy, not a checkout's
    assert ids and all("site-packages/pdfleet/conformance_suite/test_conformance.py::" in i for i in ids), out
    assert any(i.endswith("test_router_ready[node1]") for i in ids), out
    assert (site / "pdfleet" / "conformance_suite" / "test_conformance.py").is_file()


def test_the_sim_wheel_installs_next_to_pdfleet_and_brings_pdfleet_sim(
        installed_with_sim: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = installed_with_sim
    code = "import pdfleet_sim, pdfleet_sim.worker, pdfleet_sim.testing; print(pdfleet_sim.__file__)"
    assert _run([str(venv / "bin" / "python"), "-c", code], env, tmp_path).stdout.startswith(str(venv))
    out = _run([str(venv / "bin" / "pdfleet"), "sim", "--help"], env, tmp_path).stdout
    assert "usage: pdfleet sim" in out and "up" in out and "down" in out
    top = _run([str(venv / "bin" / "pdfleet"), "--help"], env, tmp_path).stdout
    assert "needs the separate pdfleet-sim" not in top  # the real command, not the stand-in
