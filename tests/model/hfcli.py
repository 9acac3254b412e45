"""The `hf` CLI at the huggingface_hub version the service venv pins (constants.yml overlay_requirements), in a
venv of its own under .cache/hub-cli (built once per version with pip, like the sglang role builds the service
venv; a file lock keeps concurrent test runs from building it twice)."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import yaml
from pdfleet.paths import REPO_ROOT
from pdfleet.versions import OVERLAY_REQUIREMENTS

CACHE = REPO_ROOT / ".cache" / "hub-cli"


def pinned_hub_requirements() -> dict[str, str]:
    """SGLang version -> its huggingface-hub requirement (e.g. 'huggingface-hub==1.33.0')."""
    return {v: r for v, reqs in OVERLAY_REQUIREMENTS.items() for r in reqs if r.startswith("huggingface-hub==")}


def sim_inventory_sglang() -> str:
    """The SGLang version of inventory/sim (the default suite tests the hub pin of that version)."""
    cluster = yaml.safe_load((REPO_ROOT / "inventory/sim/group_vars/all/cluster.yml").read_text())
    return str(cluster["pdfleet_cluster"]["sglang"]["version"])


def hf_cli(requirement: str) -> Path:
    """The venv's `hf` for ``requirement``, installed first when missing."""
    venv = CACHE / requirement.replace("==", "-")
    hf = venv / "bin" / "hf"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / ".complete").is_file():
            return hf
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=300)
        subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--no-input", requirement],
                       check=True, timeout=900)
        (venv / ".complete").write_text(requirement + "\n")
    return hf
