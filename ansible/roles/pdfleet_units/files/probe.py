"""The pdfleet_units role's one look at a host (pdfleet_probe: settings on stdin).

Prints JSON: the service user and group, each managed directory's and file's mode/owner/group (files also
their sha256, never their content: secrets.env is one of them), each unit's enabled/active state, and for the
prune the host's pdfleet-*.service files: the names of all of them ("present") and, for those the plan does not
name, their path and base64 content ("unplanned", in the shape of ansible.builtin.slurp's results, which
pdfleet.prune reads). A converged host costs one round trip and the role's tasks run only for what differs.
Every key of the settings is optional. Changes nothing.
"""

import base64
import glob
import json
import os
import subprocess
import sys

from pdfleet_probe_common import group_of, stat_of, user_of


def _states(verb: str, units: list[str]) -> list[str]:
    if not units:
        return []
    proc = subprocess.run(["systemctl", verb, *units], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          text=True)
    lines = proc.stdout.split()
    return lines if len(lines) == len(units) else ["unknown"] * len(units)


def _unit_files(unit_dir: str, pattern: str, planned: list[str]) -> dict:
    paths = sorted(glob.glob(os.path.join(unit_dir, pattern)))
    names = [os.path.basename(p)[: -len(".service")] for p in paths]
    unplanned = []
    for path, name in zip(paths, names, strict=True):
        if name in planned:
            continue
        with open(path, "rb") as f:
            unplanned.append({"source": path, "content": base64.b64encode(f.read()).decode()})
    return {"present": names, "unplanned": unplanned}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"user": user_of(cfg["user"]) if cfg.get("user") else None,
                 "group": group_of(cfg["group"]) if cfg.get("group") else None}
    out["dirs"] = {p: stat_of(p) for p in cfg.get("dirs", [])}
    out["files"] = {p: stat_of(p, digest=True) for p in cfg.get("files", [])}
    units = cfg.get("units", [])
    out["units"] = {u: {"enabled": e, "active": a}
                    for u, e, a in zip(units, _states("is-enabled", units), _states("is-active", units), strict=True)}
    if "unit_dir" in cfg:
        out.update(_unit_files(cfg["unit_dir"], cfg["unit_glob"], cfg.get("planned", [])))
    print(json.dumps(out))


main()
