"""Where the simulator's and pdfleet's import packages live, for an interpreter that runs them without this
install (the SGLang CPU runtime's python, a sim worker started with PYTHONPATH): two distributions, and in a
checkout two source trees (scripts/sim and scripts)."""

from __future__ import annotations

import os
from pathlib import Path

import pdfleet


def import_roots() -> list[str]:
    """The directories that hold pdfleet_sim and pdfleet (one when both are installed in the same place)."""
    roots = [str(Path(__file__).resolve().parents[1]), str(Path(pdfleet.__file__).resolve().parents[1])]
    return list(dict.fromkeys(roots))


def import_path() -> str:
    """import_roots() as a PYTHONPATH value."""
    return os.pathsep.join(import_roots())
