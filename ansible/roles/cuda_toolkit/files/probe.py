"""The cuda_toolkit role's one look at a host (pdfleet_probe: settings on stdin; prints JSON): the
installed packages (one dpkg-query), whether the CUDA repository is configured, the profile script's state
and `nvcc --version`. The role's tasks run only for what differs. Changes nothing."""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import subprocess
import sys


def _names(uid: int, gid: int) -> tuple[str, str]:
    """Owner and group names; the number itself for an id with no name (a deleted user), never a crash."""
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return owner, group


def _run(argv: list[str]) -> dict:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "msg": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "msg": proc.stderr.strip()}


def _file(path: str) -> dict | None:
    try:
        st = os.stat(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None
    owner, group = _names(st.st_uid, st.st_gid)
    return {"sha256": digest, "mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    rows = _run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    out = {"packages": {w[0]: w[1] for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"},
           "source_exists": os.path.exists(cfg["source"]), "profile": _file(cfg["profile"]),
           "nvcc": _run([cfg["nvcc"], "--version"])}
    print(json.dumps(out))


main()
