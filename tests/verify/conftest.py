"""Fixtures for the verification tests: a LocalPD stack on 127.0.0.1 and a way to run `pdfleet verify`."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pdfleet_sim.paths import import_path
from pdfleet_sim.testing.localpd import REPO_ROOT, LocalPD, RouterSpec, free_port
from pdfleet_sim.testing.realwedge import runtime_pd_env

SGLANG_VERSION = "0.5.15.post1"


@dataclass
class VerifyRun:
    rc: int
    report: dict[str, Any]
    stdout: str
    stderr: str

    def check(self, name: str) -> dict[str, Any]:
        return next(c for c in self.report["checks"] if c["name"] == name)


def run_verify(args: Sequence[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "scripts")}
    return subprocess.run([sys.executable, "-m", "pdfleet.verify", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(REPO_ROOT))


def verify_local(pd: LocalPD, workdir: Path, *extra: str) -> VerifyRun:
    """`pdfleet verify` against a LocalPD with small, CI-sized settings (overridable by ``extra``)."""
    report = workdir / "verify.json"
    args = ["--router", pd.router_url, "--prefill", pd.prefill_url, "--decode", pd.decode_url,
            "--log-file", f"prefill={pd.log_dir / 'prefill.log'}", "--log-file", f"decode={pd.log_dir / 'decode.log'}",
            "--expect-model", pd.model, "--report", str(report),
            "--cycles", "2", "--concurrency", "30", "--window", "4", "--pause", "1", "--settle", "2",
            "--liveness-deadline", "10", "--recovery-deadline", "6", "--probe-concurrency", "8",
            "--probe-deadline", "6", "--idle-deadline", "6", "--bench-requests", "8", "--bench-concurrency", "4",
            "--bench-max-tokens", "16", "--baseline-file", str(workdir / "baselines.json"), *extra]
    proc = run_verify(args)
    data = json.loads(report.read_text()) if report.is_file() else {}
    return VerifyRun(proc.returncode, data, proc.stdout, proc.stderr)


def verify_defaults(pd: LocalPD, workdir: Path, *extra: str) -> VerifyRun:
    """`pdfleet verify` against a LocalPD with every protocol setting at its default (2 x 60, 20 s windows)."""
    report = workdir / "verify.json"
    args = ["--router", pd.router_url, "--prefill", pd.prefill_url, "--decode", pd.decode_url,
            "--log-file", f"prefill={pd.log_dir / 'prefill.log'}", "--log-file", f"decode={pd.log_dir / 'decode.log'}",
            "--expect-model", pd.model, "--report", str(report),
            "--baseline-file", str(workdir / "baselines.json"), *extra]
    proc = run_verify(args, timeout=900)
    data = json.loads(report.read_text()) if report.is_file() else {}
    return VerifyRun(proc.returncode, data, proc.stdout, proc.stderr)


def _router(kind: str) -> RouterSpec:
    spec = RouterSpec.find(kind)
    if spec is None:
        pytest.skip(f"router {kind} is not installed (scratch venv under .cache/, or PDFLEET_ROUTER_BIN)")
    return spec


@pytest.fixture(scope="session")
def router() -> RouterSpec:
    return _router(os.environ.get("PDFLEET_ROUTER_KIND", "smg"))


@pytest.fixture(scope="session")
def runtime() -> Any:
    """The heavy CPU runtime with SGLang 0.5.15.post1's real conn.py, pristine and patched.

    Built (once, cached under .cache/runtime or $PDFLEET_RUNTIME_DIR) when missing, so `pytest tests/verify`
    on a fresh clone runs these tests instead of skipping them.
    """
    from pdfleet.patch.runtime import ensure_runtime

    return ensure_runtime([SGLANG_VERSION])


def runtime_env(rt: Any, patched: bool) -> dict[str, str]:
    """The runtime python's worker environment (its PYTHONPATH gets pdfleet_sim too: the stand-in is not in it)."""
    return runtime_pd_env(rt, patched, SGLANG_VERSION)


@contextlib.contextmanager
def local_pd(python: Sequence[str], env: Mapping[str, str], router: RouterSpec, log_dir: Path) -> Iterator[LocalPD]:
    """A LocalPD whose router keeps its metrics listener on a free loopback port (never 0.0.0.0:29000).

    The workers log at debug: SGLang prints the prefill's handling of a decode's ABORT at debug level only
    (see pdfleet.verify.signatures), and the logs check needs that evidence.
    """
    args = ["--prometheus-port", str(free_port()), "--prometheus-host", "127.0.0.1"]
    with LocalPD(list(python), log_dir, env, router, router_args=args,
                 worker_args=["--log-level", "debug", "--log-level-http", "info"]) as pd:
        yield pd


def _can_import(python: str, modules: str) -> bool:
    try:
        return subprocess.run([python, "-c", f"import {modules}"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def light_python() -> str:
    """An interpreter that runs the simulated worker on its light KV stand-in (aiohttp + pyzmq)."""
    for cand in (os.environ.get("PDFLEET_SIM_PYTHON", ""), sys.executable,
                 str(REPO_ROOT / ".cache/simdev/bin/python"), str(REPO_ROOT / ".cache/runtime/base/bin/python")):
        if cand and Path(cand).is_file() and _can_import(cand, "aiohttp, zmq"):
            return cand
    pytest.skip("no interpreter with aiohttp and pyzmq for the simulated worker (set PDFLEET_SIM_PYTHON)")


def light_env() -> dict[str, str]:
    """The light KV stand-in, healthy (its fake wedge prints the very death the logs check looks for: the wedge
    tests run SGLang's real code instead)."""
    return {"PYTHONPATH": import_path(), "PDFLEET_SIM_KV_BACKEND": "fake", "PYTHONUNBUFFERED": "1",
            "PDFLEET_SIM_ABORT_DELAY_S": "0.5"}
