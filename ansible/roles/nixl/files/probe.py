"""The nixl role's one look at a host (pdfleet_probe: settings on stdin; prints JSON): the installed
packages (one dpkg-query), the service venv and its distributions, what `import nixl` reports in it and
`ucx_info -d`. The role's tasks run only for what differs; its checks read this. Changes nothing."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys


def _run(argv: list[str]) -> dict:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    rows = _run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    out: dict = {"packages": sorted(w[0] for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed")}
    python = os.path.join(cfg["venv"], "bin", "python")
    out["venv"] = os.path.isfile(python)
    out["dists"] = []
    for lib in glob.glob(os.path.join(cfg["venv"], "lib", "python3*", "site-packages")):
        for entry in sorted(os.listdir(lib)):
            if entry.endswith(".dist-info"):
                name, _, version = entry[: -len(".dist-info")].partition("-")
                out["dists"].append(re.sub(r"[-_.]+", "-", name.lower()) + "==" + version.lower())
    out["nixl_import"] = _run([python, "-c", "import importlib.metadata as m, nixl; print(m.version('nixl'))"])
    out["ucx"] = _run([cfg["ucx_info"], "-d"])
    print(json.dumps(out))


main()
