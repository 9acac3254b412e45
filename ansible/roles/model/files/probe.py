"""The model role's one look at the host (pdfleet_probe: settings on stdin; prints JSON).

  dir    the model directory's {mode, owner, group}, or null when it is missing
  files  with "files": true, each regular file directly in it as "name sha256 mode owner group" (the stand-in's
         few small files; the mirror and hub sources compare their manifests instead)
Changes nothing.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import sys


def _who(st: os.stat_result) -> tuple[str, str]:
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return owner, group


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"dir": None, "files": []}
    try:
        st = os.stat(cfg["path"])
    except OSError:
        print(json.dumps(out))
        return
    owner, group = _who(st)
    out["dir"] = {"mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}
    if cfg["files"] and os.path.isdir(cfg["path"]):
        for entry in sorted(os.scandir(cfg["path"]), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                fst = entry.stat(follow_symlinks=False)
                with open(entry.path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
                out["files"].append(" ".join([entry.name, digest, "%04o" % (fst.st_mode & 0o7777), *_who(fst)]))
    print(json.dumps(out))


main()
