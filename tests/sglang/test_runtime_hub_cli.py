"""The sim's service environment (the CPU runtime: base venv + the version's overlay, which the sglang role installs
the same way on each simulated host) can run huggingface_hub's `hf` CLI, the tool the model role downloads with.

CI's hub test found it broken once: the overlay's huggingface-hub is installed without dependencies and imports
click, which the base's typer 0.29 no longer brings; the service venv had had it only from the router."""

from __future__ import annotations

import subprocess

import pytest
from pdfleet.patch import manifest as patches
from pdfleet.patch import runtime

_REQUIREMENTS_MET = """
import importlib.metadata as md
from packaging.requirements import Requirement
missing = []
for line in md.requires("huggingface-hub") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    try:
        found = md.version(req.name)
    except md.PackageNotFoundError:
        missing.append(f"{req} (not installed)")
        continue
    if not req.specifier.contains(found, prereleases=True):
        missing.append(f"{req} (found {found})")
print("\\n".join(missing))
"""


@pytest.mark.parametrize("version", patches.supported_versions())
def test_the_hf_cli_runs_in_the_sim_service_environment(version: str, sglang_runtime: runtime.Runtime) -> None:
    env = sglang_runtime.env(version)
    met = subprocess.run([str(sglang_runtime.python), "-c", _REQUIREMENTS_MET], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert met.returncode == 0, met.stderr
    assert met.stdout.strip() == "", (
        f"huggingface-hub's requirements not met in {sglang_runtime.overlay(version)} over {sglang_runtime.base}:\n"
        f"{met.stdout}Fix: add them to overlay_requirements[{version!r}] (or overlay_common, for every version) in "
        "scripts/pdfleet/constants.yml")
    run_hf = "import sys; from huggingface_hub.cli.hf import main; sys.argv = ['hf', 'download', '--help']; main()"
    cli = subprocess.run([str(sglang_runtime.python), "-c", run_hf], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "download" in cli.stdout.lower()
