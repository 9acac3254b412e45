"""The cuda_toolkit role's one look at a host (host python3; argv[1] = JSON settings; prints JSON): the
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
    return {"sha256": digest, "mode": "%04o" % (st.st_mode & 0o7777), "owner": pwd.getpwuid(st.st_uid).pw_name,
            "group": grp.getgrgid(st.st_gid).gr_name}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    rows = _run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    out = {"packages": {w[0]: w[1] for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"},
           "source_exists": os.path.exists(cfg["source"]), "profile": _file(cfg["profile"]),
           "nvcc": _run([cfg["nvcc"], "--version"])}
    print(json.dumps(out))


main()
