"""Fixtures for the simulated worker tests: which interpreters and routers are available."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pdfleet.versions import ROUTER_RELEASES
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import REPO_ROOT, RouterSpec


def _can_import(python: str, modules: str) -> bool:
    try:
        return subprocess.run([python, "-c", f"import {modules}"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _sim_python() -> str | None:
    """An interpreter that can run the simulated worker (aiohttp + pyzmq)."""
    candidates = [os.environ.get("PDFLEET_SIM_PYTHON", ""), sys.executable,
                  str(REPO_ROOT / ".cache/runtime/base/bin/python"), str(REPO_ROOT / ".cache/simdev/bin/python")]
    for cand in candidates:
        if cand and Path(cand).is_file() and _can_import(cand, "aiohttp, zmq"):
            return cand
    return None


@pytest.fixture(scope="session")
def sim_python() -> str:
    py = _sim_python()
    if py is None:
        pytest.skip("no interpreter with aiohttp and pyzmq for the simulated worker "
                    "(install them in the project venv or set PDFLEET_SIM_PYTHON)")
    return py


@pytest.fixture(scope="session")
def fake_env() -> dict[str, str]:
    """Environment of a simulated worker on the light KV stand-in (no SGLang needed)."""
    return {"PYTHONPATH": import_path(), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1",
            "PDFLEET_SIM_ABORT_DELAY_S": "0.5"}


def _router(kind: str) -> RouterSpec:
    spec = RouterSpec.find(kind)
    if spec is None:
        pytest.skip(f"router {kind} is not installed (scratch venv under .cache/ or PDFLEET_ROUTER_BIN)")
    return spec


@pytest.fixture(scope="session")
def router() -> RouterSpec:
    """The router pdfleet deploys (smg; $PDFLEET_ROUTER_KIND=sglang-router runs these tests on the old one)."""
    return _router(os.environ.get("PDFLEET_ROUTER_KIND", "smg"))


# the router pdfleet deployed before smg, still accepted as router_package (constants.yml's router_releases)
SGL_ROUTER_PIN = f"sglang-router=={ROUTER_RELEASES['sglang-router']}"


@pytest.fixture(scope="session")
def sgl_router() -> RouterSpec:
    """sglang-router 0.3.2 in its own scratch venv under .cache/ (it installs an `smg` script of its own, so it
    never shares a venv with smg)."""
    venv = REPO_ROOT / ".cache" / "router-sgl"
    if not (venv / "bin" / "python").is_file():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    if subprocess.run([str(venv / "bin" / "python"), "-c", "import sglang_router"], capture_output=True,
                      check=False).returncode != 0:
        proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", SGL_ROUTER_PIN],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            pytest.fail(f"could not install {SGL_ROUTER_PIN} into {venv}: {proc.stderr.strip()[-300:]}")
    return _router("sglang-router")


@pytest.fixture(scope="session")
def smg_router(router: RouterSpec) -> RouterSpec:
    """smg (the project venv's, which pdfleet deploys)."""
    if router.kind != "smg":
        return _router("smg")
    return router
