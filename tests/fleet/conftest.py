"""Fixtures for the fleet tests: the real router (sglang-router 0.3.2) and simulated workers on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet.paths import REPO_ROOT
from pdfleet.testing.localpd import LocalPD, RouterSpec, free_port


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


@pytest.fixture
def real_pd(router_spec: RouterSpec, tmp_path: Path) -> Iterator[LocalPD]:
    """A pair running SGLang 0.5.15.post1's real NIXL bootstrap code, patched (the CPU runtime, built once when
    missing), logging at debug: the isolated gate's logs check needs the prefill's handled ABORTs, which SGLang
    prints at debug only and the light stand-in never produces."""
    from pdfleet.patch.runtime import ensure_runtime

    version = "0.5.15.post1"
    rt = ensure_runtime([version])
    env = {**rt.env(version), "PDFLEET_SIM_CONN_FILE": str(rt.conn_file(version, True)),
           "PYTHONWARNINGS": "ignore", "PYTHONUNBUFFERED": "1"}
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    with LocalPD([str(rt.python)], tmp_path / "pd", env, router_spec, router_args=args,
                 worker_args=["--log-level", "debug", "--log-level-http", "info"]) as pd:
        yield pd
