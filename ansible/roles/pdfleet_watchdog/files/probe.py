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
  differs       {entry: bool} for each of DIFFERS: what differs from the settings' "want" (the user, directory and
                files' states, the pins, the remediation), decided here by differs(); each entry gates one task of
                tasks/apply.yml
Nothing is changed on the host.
"""

import json
import os
import sys

from pdfleet_probe_common import (
    debs_missing,
    dists_of,
    group_of,
    pin_key,
    purelib_of,
    record_bad,
    stat_of,
    unit_state,
    user_of,
)

# The entries of "differs" (the role's __pdfleet_watchdog_differs), each the gate of one task of tasks/apply.yml.
DIFFERS = ("debs", "group", "user", "config_dir", "plan", "venv", "pins", "wheel", "old_tree", "command", "polkit",
           "polkit_gone", "unit", "running")
# A started unit's state: enabled and active.
RUNNING = {"enabled": "enabled", "active": "active"}


def pins_missing(pins: list[str], dists: list[str]) -> list[str]:
    """The pins the venv does not hold at exactly that version, normalised as dists ("name==version", pin_key); a
    pin that is not "name==version" never matches, so it always counts (pip decides about it)."""
    return sorted({pin_key(p) for p in pins} - set(dists))


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs on the host: {entry: bool} for each of DIFFERS, from the settings' "want" and what the probe
    found (no I/O). All false without "want" (settings that only look).

    debs: a package is not installed. group, user: the watchdog's group is missing; its user is missing or not as
    wanted (primary group, shell, home, or a wanted supplementary group missing). config_dir, plan, command, unit:
    the directory's or file's state (mode, owner, group; files also sha256) is not the wanted one. venv: the venv
    has no python. pins: a pin is not installed at its version, or the venv's hash lock (paths "lock") is not this
    one. wheel: an installed file of the pdfleet wheel does not match its RECORD (or it is not installed), or the
    marker does not hold this wheel's sha256. old_tree: the package tree of earlier releases is there. polkit: in
    restart remediation, the polkit rule is not as wanted; polkit_gone: in any other remediation, a polkit rule is
    there. running: the unit is not enabled and active.
    """
    want = cfg["want"]
    paths, files, exists = want["paths"], found["files"], found["exists"]
    user, want_user = found["user"], want["user"]
    restart = want["remediation"] == "restart"

    def file_differs(key: str) -> bool:
        return files[paths[key]] != want["files"][paths[key]]

    return {
        "debs": len(found["debs_missing"]) > 0,
        "group": found["group"] is None,
        "user": (user is None or user["group"] != want_user["group"]
                 or any(g not in user["groups"] for g in want_user["groups"])
                 or user["shell"] != want_user["shell"] or user["home"] != want_user["home"]),
        "config_dir": any(found["dirs"].get(path) != state for path, state in want["dirs"].items()),
        "plan": file_differs("plan"),
        "venv": not exists[paths["venv_python"]],
        "pins": len(pins_missing(want["pins"], found["dists"])) > 0 or file_differs("lock"),
        "wheel": found["wheel_bad"] != "" or file_differs("marker"),
        "old_tree": exists[paths["old_tree"]],
        "command": file_differs("command"),
        "polkit": restart and file_differs("polkit"),
        "polkit_gone": not restart and exists[paths["polkit"]],
        "unit": file_differs("unit"),
        "running": found["unit"] != RUNNING,
    }


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
    if "want" in cfg:  # without a wanted state there is no verdict (never a silent "nothing differs")
        out["differs"] = differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
