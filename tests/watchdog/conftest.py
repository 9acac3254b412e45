"""Fixtures for the watchdog tests against real processes: the real router and simulated workers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import RouterSpec


@pytest.fixture(scope="session")
def sim_python() -> str:
    ok = subprocess.run([sys.executable, "-c", "import aiohttp, zmq"], capture_output=True, timeout=60).returncode
    if ok != 0:
        pytest.skip("no aiohttp and pyzmq for the simulated worker (make setup)")
    return sys.executable


@pytest.fixture(scope="session")
def router_spec() -> RouterSpec:
    spec = RouterSpec.find("smg")
    if spec is None:
        pytest.skip("smg (the router pdfleet deploys) is not installed in this venv (make setup)")
    return spec


@pytest.fixture(scope="session")
def light_env() -> Callable[..., dict[str, str]]:
    """The simulated workers' environment: fake KV backend; ``wedge`` makes an ABORT stop the fake bootstrap
    thread, which then prints the death itself. Only for tests about what happens to a wedged pair
    (remediation): recognising a wedge is tested on SGLang's real code (test_watchdog_names_a_real_sglang_wedge)."""

    def env(wedge: bool = False, tokens_per_s: float = 40.0) -> dict[str, str]:
        out = {"PYTHONPATH": import_path(), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1",
               "PDFLEET_SIM_ABORT_DELAY_S": "0.5", "PDFLEET_SIM_DECODE_TOKENS_PER_S": str(tokens_per_s)}
        if wedge:
            out["PDFLEET_SIM_FAKE_ABORT_KILLS_THREAD"] = "1"
        return out

    return env
