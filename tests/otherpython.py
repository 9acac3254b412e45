"""A real CPython of another minor version on this machine (on PATH, or a pyenv build): the tests of the check
that refuses a host whose Python cannot install the pin give a host that interpreter."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess


def other_python(minor: str) -> str | None:
    """The path of a working CPython 3.<minor>, or None."""
    found = shutil.which(f"python3.{minor}")
    candidates = ([found] if found else []) + sorted(glob.glob(os.path.expanduser(
        f"~/.pyenv/versions/3.{minor}.*/bin/python3.{minor}")))
    for path in candidates:
        proc = subprocess.run([path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip() == f"3.{minor}":
            return path
    return None
