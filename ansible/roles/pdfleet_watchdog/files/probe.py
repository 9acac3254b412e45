"""The pdfleet_watchdog role's one probe of the router host (pdfleet_probe: settings on stdin).

Prints JSON with everything the role's no-op path needs, in one round trip instead of a module call per item:
  debs_missing  the .deb packages not installed (one dpkg-query)
  user, group   the watchdog user (its group, home, shell, supplementary groups) and group, or null
  dirs, files   {path: {mode, owner, group} or null}; files also their sha256 (never their content)
  exists        {path: bool} for the paths the role creates or removes (the venv's python, old trees)
  dists         the distributions in the watchdog venv, as normalised "name==version"
  wheel_bad     the first file of the installed pdfleet wheel that does not match its RECORD, "not installed",
                or "" when every file matches (a hand edit on the host shows as drift)
  unit          the watchdog unit's enabled and active state
Nothing is changed on the host.
"""

import json
import os
import sys

from pdfleet_probe_common import debs_missing, dists_of, group_of, purelib_of, record_bad, stat_of, unit_state, user_of


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"debs_missing": debs_missing(cfg["debs"]), "wheel_bad": "not installed"}
    out["user"], out["group"] = user_of(cfg["user"]), group_of(cfg["group"])
    out["dirs"] = {p: stat_of(p) for p in cfg["dirs"]}
    out["files"] = {p: stat_of(p, digest=True) for p in cfg["files"]}
    out["exists"] = {p: os.path.lexists(p) for p in cfg["exists"]}
    purelib = purelib_of(cfg["venv"])
    dists = dists_of(purelib)
    out["dists"] = sorted(dists)
    for dist, entry in dists.items():
        if dist.startswith("pdfleet=="):
            out["wheel_bad"] = record_bad(purelib, entry)
    out["unit"] = unit_state(cfg["unit"])
    print(json.dumps(out))


main()
