"""Hypothesis property test, run in the heavy runtime: random and truncated frames never kill the
patched bootstrap thread of any supported version, and a valid transfer info is still processed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime

pytestmark = pytest.mark.sglang
SCRIPT = Path(__file__).with_name("fuzz_bootstrap.py")


@pytest.mark.parametrize("version", patches.supported_versions())
def test_patched_thread_survives_random_frames(version: str, sglang_runtime: runtime.Runtime) -> None:
    proc = subprocess.run(
        [str(sglang_runtime.python), str(SCRIPT), version, str(sglang_runtime.conn_file(version, True)), "60"],
        env=sglang_runtime.env(version), capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
