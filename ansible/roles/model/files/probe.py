"""The model role's one probe of the host (pdfleet_probe: settings on stdin; prints JSON).

  dir    the model directory's {mode, owner, group}, or null when it is missing
  files  with "files": true, each regular file directly in it as "name sha256 mode owner group" (the stand-in's
         few small files; the mirror and hub sources compare their manifests instead)
Changes nothing.
"""

import json
import os
import sys

from pdfleet_probe_common import owner_group, sha256_of, stat_of


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"dir": stat_of(cfg["path"]), "files": []}
    if out["dir"] is not None and cfg["files"] and os.path.isdir(cfg["path"]):
        for entry in sorted(os.scandir(cfg["path"]), key=lambda e: e.name):
            if entry.is_file(follow_symlinks=False):
                fst = entry.stat(follow_symlinks=False)
                out["files"].append(" ".join([entry.name, sha256_of(entry.path).hexdigest(),
                                              "%04o" % (fst.st_mode & 0o7777), *owner_group(fst)]))
    print(json.dumps(out))


main()
