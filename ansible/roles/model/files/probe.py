"""The model role's one probe of the host (pdfleet_probe: settings on stdin; prints JSON).

  dir      the model directory's {mode, owner, group}, or null when it is missing
  files    with "files": true, each regular file directly in it by name: {sha256, mode, owner, group} (the
           stand-in's few small files; the mirror and hub sources compare their manifests instead)
  differs  what differs from the wanted state (the settings' "want"), by the task of tasks/apply.yml that puts
           it back (differs() below)
Changes nothing.
"""

from __future__ import annotations

import json
import os
import sys

from pdfleet_probe_common import owner_group, sha256_of, stat_of

# The entries of "differs", each gating one task of tasks/apply.yml (when: __model_differs['<entry>']).
DIFFERS = ("dir", "standin")


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs between the wanted state (``cfg["want"]``) and what the probe found, by entry of DIFFERS.

    want: dir (the model directory's {mode, owner, group}), standin (None unless the source is the stand-in,
    else {files: {name: sha256}, mode, owner, group}).
      dir      the directory is missing or not as wanted;
      standin  the source is the stand-in and one of its files is missing from the directory or not at its
               sha256, mode, owner or group (other files there are left alone).
    """
    want = cfg["want"]
    standin = want["standin"]
    return {"dir": found["dir"] != want["dir"],
            "standin": standin is not None and any(
                found["files"].get(name) != {"sha256": sha256, "mode": standin["mode"], "owner": standin["owner"],
                                             "group": standin["group"]}
                for name, sha256 in standin["files"].items())}


def files_in(path: str) -> dict[str, dict]:
    """Each regular file directly in ``path`` (not through a symlink) by name: {sha256, mode, owner, group}."""
    out = {}
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False):
            fst = entry.stat(follow_symlinks=False)
            owner, group = owner_group(fst)
            out[entry.name] = {"sha256": sha256_of(entry.path).hexdigest(), "mode": "%04o" % (fst.st_mode & 0o7777),
                               "owner": owner, "group": group}
    return out


def main() -> None:
    """Read the settings, look at the host, print what was found and what differs."""
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    found: dict = {"dir": stat_of(cfg["path"]), "files": {}}
    if found["dir"] is not None and cfg["files"] and os.path.isdir(cfg["path"]):
        found["files"] = files_in(cfg["path"])
    print(json.dumps({**found, "differs": differs(cfg, found)}))


if __name__ == "__main__":
    main()
