"""The sim repository's stand-in nvidia-smi, runnable on the test machine: its host paths (the loaded module's
version, /etc/pdfleet-sim/hardware.json) moved under a directory of the test's, with the hardware it is given."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pdfleet_sim import aptrepo

DRIVER = "580.95.05"


def stand_in_nvidia_smi(directory: Path, **hardware: object) -> Path:
    """Write the stand-in (DEFAULT_HARDWARE updated with ``hardware``) under ``directory``; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "version").write_text(DRIVER + "\n")
    (directory / "hardware.json").write_text(json.dumps(dict(aptrepo.DEFAULT_HARDWARE, **hardware)))
    script = (aptrepo._fill(aptrepo.NVIDIA_SMI, VERSION=DRIVER)
              .replace("#!/usr/bin/python3", f"#!{sys.executable}", 1)
              .replace("/run/pdfleet-sim/nvidia/version", str(directory / "version"))
              .replace("/etc/pdfleet-sim/hardware.json", str(directory / "hardware.json")))
    path = directory / "nvidia-smi"
    path.write_text(script)
    path.chmod(0o755)
    return path
