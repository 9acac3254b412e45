"""The pdfleet_units role's one probe of a host (pdfleet_probe: settings on stdin).

Prints JSON: the service user and group, each managed directory's and file's mode/owner/group (files also
their sha256, never their content: secrets.env is one of them), each unit's enabled/active state, and for the
prune the host's pdfleet-*.service files: the names of all of them ("present") and, for those the plan does not
name, their path and base64 content ("unplanned", in the shape of ansible.builtin.slurp's results, which
pdfleet.prune reads). A converged host costs one round trip and the role's tasks run only for what differs.
"stale" names each active unit that started before one of its paths (settings "stale_paths": {unit: [globs]}: its
files and the code it runs) last changed: the restart of a run stopped after a change but before its handler ran,
still owed. Every key of the settings is optional. Changes nothing.

"differs" ({entry: bool}, the entries of DIFFERS) is what of the install differs from the settings' "want" (the
service user, the directories' and files' states, whether the units start and restart on a change), decided here by
differs(); each entry gates the install (tasks/install.yml). Without "want" (the prune alone) every entry is false.
"""

import base64
import glob
import json
import os
import subprocess
import sys

from pdfleet_probe_common import group_of, stat_of, user_of

# A file written within this many seconds after a unit started does not make it stale (systemd's unix timestamps
# are whole seconds; a converge writes every file before its restart handler runs).
STALE_MARGIN_S = 2.0

# The entries of "differs" (the role's __pdfleet_units_differs), each one gate of the install.
DIFFERS = ("group", "user", "dirs", "files", "stale", "running")
# A started unit's state: enabled and active.
RUNNING = {"enabled": "enabled", "active": "active"}


def _show(units: list[str]) -> dict[str, dict[str, str]]:
    """Each unit's enabled and active state and when it last became active (one `systemctl show` for all)."""
    if not units:
        return {}
    proc = subprocess.run(["systemctl", "show", "--timestamp=unix", "-p",
                           "Id,UnitFileState,ActiveState,ActiveEnterTimestamp", *units],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    found = {}
    for block in proc.stdout.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        found[props.get("Id", "")] = props
    return {u: found.get(u, {}) for u in units}


def _newest(patterns: list[str]) -> tuple[float, str]:
    """The newest modification time among the paths the globs match, and that path ((0, "") for none)."""
    newest, newest_path = 0.0, ""
    for pattern in patterns:
        for path in glob.glob(pattern):
            try:
                mtime = os.stat(path).st_mtime
            except OSError:
                continue
            if mtime > newest:
                newest, newest_path = mtime, path
    return newest, newest_path


def _stale(shown: dict[str, dict[str, str]], paths: dict[str, list[str]]) -> dict[str, str]:
    """{unit: why} for each active unit that started before the newest of its paths (globs) last changed."""
    out = {}
    for unit, patterns in paths.items():
        props = shown.get(unit, {})
        stamp = props.get("ActiveEnterTimestamp", "")
        if props.get("ActiveState") != "active" or not stamp.startswith("@"):
            continue
        newest, path = _newest(patterns)
        if newest > int(stamp[1:]) + STALE_MARGIN_S:
            out[unit] = f"{path} changed {newest - int(stamp[1:]):.0f} s after {unit} started"
    return out


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


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What of the install differs on the host: {entry: bool} for each of DIFFERS, from the settings' "want" and what
    the probe found (no I/O). All false without "want" (a probe for the prune alone).

    group: the service group is missing. user: the service user is missing or not as wanted (its primary group,
    shell, home, or one of the wanted supplementary groups missing). dirs, files: a managed directory's or file's
    state (mode, owner, group; files also sha256) is not the wanted one, or it is missing. stale: a unit started
    before its files or code last changed (when units start and restart on a change). running: a unit is not
    enabled and active (when units start).
    """
    want = cfg["want"]
    user, want_user = found["user"], want["user"]
    return {
        "group": found["group"] is None,
        "user": (user is None or user["group"] != want_user["group"]
                 or any(g not in user["groups"] for g in want_user["groups"])
                 or user["shell"] != want_user["shell"] or user["home"] != want_user["home"]),
        "dirs": found["dirs"] != want["dirs"],
        "files": found["files"] != want["files"],
        "stale": bool(want["start"] and want["restart_on_change"] and found["stale"]),
        "running": bool(want["start"]) and any(state != RUNNING for state in found["units"].values()),
    }


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"user": user_of(cfg["user"]) if cfg.get("user") else None,
                 "group": group_of(cfg["group"]) if cfg.get("group") else None}
    out["dirs"] = {p: stat_of(p) for p in cfg.get("dirs", [])}
    out["files"] = {p: stat_of(p, digest=True) for p in cfg.get("files", [])}
    shown = _show(cfg.get("units", []))
    out["units"] = {u: {"enabled": p.get("UnitFileState") or "unknown", "active": p.get("ActiveState") or "unknown"}
                    for u, p in shown.items()}
    out["stale"] = _stale(shown, cfg.get("stale_paths", {}))
    if "unit_dir" in cfg:
        out.update(_unit_files(cfg["unit_dir"], cfg["unit_glob"], cfg.get("planned", [])))
    if "want" in cfg:  # without a wanted state there is no verdict (never a silent "nothing differs")
        out["differs"] = differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
