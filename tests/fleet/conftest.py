"""Fixtures for the fleet tests: the real router (sglang-router 0.3.2) and simulated workers on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet.simworker.launch import LocalPD, RouterSpec, free_port


def _can_import(python: str, modules: str) -> bool:
    try:
        return subprocess.run([python, "-c", f"import {modules}"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def sim_python() -> str:
    for cand in (os.environ.get("PDFLEET_SIM_PYTHON", ""), sys.executable):
        if cand and Path(cand).is_file() and _can_import(cand, "aiohttp, zmq"):
            return cand
    pytest.skip("no interpreter with aiohttp and pyzmq for the simulated worker (set PDFLEET_SIM_PYTHON)")


@pytest.fixture(scope="session")
def router_spec() -> RouterSpec:
    spec = RouterSpec.find("sglang-router")
    if spec is None:
        pytest.skip("sglang-router is not installed in this venv (make setup)")
    return spec


def light_env(wedge: bool = False, tokens_per_s: float = 40.0) -> dict[str, str]:
    env = {"PYTHONPATH": str(REPO_ROOT / "scripts"), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1",
           "PDFLEET_SIM_ABORT_DELAY_S": "0.5", "PDFLEET_SIM_DECODE_TOKENS_PER_S": str(tokens_per_s)}
    if wedge:
        env["PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD"] = "1"
    return env


@pytest.fixture
def local_pd(sim_python: str, router_spec: RouterSpec, tmp_path: Path) -> Iterator[LocalPD]:
    """A prefill + decode pair of simulated workers behind the real router (the 'production' router)."""
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    with LocalPD([sim_python], tmp_path / "pd", light_env(), router_spec, router_args=args) as pd:
        yield pd
