"""Fixtures for the fleet tests: the real router (smg, the one pdfleet deploys) and simulated workers on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import LocalPD, RouterSpec, free_port
from pdfleet_sim.testing.realwedge import SGLANG_VERSION, runtime_pd_env


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
    spec = RouterSpec.find("smg")
    if spec is None:
        pytest.skip("smg (the router pdfleet deploys) is not installed in this venv (make setup)")
    return spec


def light_env(tokens_per_s: float = 40.0) -> dict[str, str]:
    """The light KV stand-in, healthy: for the tests about the router steps, not about a wedge (the wedge tests
    run SGLang's real code: ``pristine_pd``)."""
    return {"PYTHONPATH": import_path(), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1",
            "PDFLEET_SIM_ABORT_DELAY_S": "0.5", "PDFLEET_SIM_DECODE_TOKENS_PER_S": str(tokens_per_s)}


@pytest.fixture
def local_pd(sim_python: str, router_spec: RouterSpec, tmp_path: Path) -> Iterator[LocalPD]:
    """A prefill + decode pair of simulated workers behind the real router (the 'production' router)."""
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    with LocalPD([sim_python], tmp_path / "pd", light_env(), router_spec, router_args=args) as pd:
        yield pd


@contextlib.contextmanager
def _runtime_pd(router_spec: RouterSpec, log_dir: Path, patched: bool) -> Iterator[LocalPD]:
    from pdfleet.patch.runtime import ensure_runtime

    rt = ensure_runtime([SGLANG_VERSION])
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    with LocalPD([str(rt.python)], log_dir, runtime_pd_env(rt, patched), router_spec, router_args=args,
                 worker_args=["--log-level", "debug", "--log-level-http", "info"]) as pd:
        yield pd


@pytest.fixture
def real_pd(router_spec: RouterSpec, tmp_path: Path) -> Iterator[LocalPD]:
    """A pair running SGLang 0.5.15.post1's real NIXL bootstrap code, patched (the CPU runtime, built once when
    missing), logging at debug: the isolated gate's logs check needs the prefill's handled ABORTs, which SGLang
    prints at debug only and the light stand-in never produces."""
    with _runtime_pd(router_spec, tmp_path / "pd", patched=True) as pd:
        yield pd


@pytest.fixture
def pristine_pd(router_spec: RouterSpec, tmp_path: Path) -> Iterator[LocalPD]:
    """The same pair on SGLang 0.5.15.post1's pristine conn.py: the first decode ABORT kills a prefill rank's
    bootstrap thread (the incident), with SGLang's own assert and Python's traceback in the prefill's log."""
    with _runtime_pd(router_spec, tmp_path / "pd", patched=False) as pd:
        yield pd
