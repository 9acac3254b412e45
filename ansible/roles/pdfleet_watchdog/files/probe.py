"""The pdfleet_watchdog role's one look at the router host (pdfleet_probe: settings on stdin).

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

from __future__ import annotations

import base64
import contextlib
import glob
import grp
import hashlib
import json
import os
import pwd
import re
import subprocess
import sys


def _sha256(path: str) -> hashlib._Hash:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h


def _owner(uid: int, gid: int) -> tuple[str, str]:
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return owner, group


def _stat(path: str, digest: bool) -> dict | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    owner, group = _owner(st.st_uid, st.st_gid)
    out = {"mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}
    if digest:
        out["sha256"] = _sha256(path).hexdigest() if os.path.isfile(path) else ""
    return out


def _wheel_bad(purelib: str, dist_info: str) -> str:
    try:
        with open(os.path.join(purelib, dist_info, "RECORD")) as f:
            record = f.read()
    except OSError:
        return f"{dist_info}/RECORD (missing)"
    for line in record.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) != 3 or not parts[1].startswith("sha256="):
            continue
        path = os.path.normpath(os.path.join(purelib, parts[0]))
        if not os.path.isfile(path):
            return f"{path} (missing)"
        digest = base64.urlsafe_b64encode(_sha256(path).digest()).rstrip(b"=").decode()
        if digest != parts[1][len("sha256="):]:
            return f"{path} (sha256 differs from the RECORD)"
    return ""


def _debs_missing(debs: list[str]) -> list[str]:
    if not debs:
        return []
    proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *debs],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    rows = (line.split() for line in proc.stdout.splitlines())
    installed = {w[0] for w in rows if len(w) == 2 and w[1] == "installed"}
    return [d for d in debs if d not in installed]


def _unit(name: str) -> dict[str, str]:
    states = []
    for verb in ("is-enabled", "is-active"):
        proc = subprocess.run(["systemctl", verb, name], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              check=False)
        states.append(proc.stdout.strip() or "unknown")
    return {"enabled": states[0], "active": states[1]}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {"debs_missing": _debs_missing(cfg["debs"]), "user": None, "group": None, "dists": [],
                 "wheel_bad": "not installed"}
    with contextlib.suppress(KeyError):
        u = pwd.getpwnam(cfg["user"])
        out["user"] = {"group": _owner(u.pw_uid, u.pw_gid)[1], "home": u.pw_dir, "shell": u.pw_shell,
                       "groups": sorted(g.gr_name for g in grp.getgrall() if cfg["user"] in g.gr_mem)}
    with contextlib.suppress(KeyError):
        out["group"] = grp.getgrnam(cfg["group"]).gr_name
    out["dirs"] = {p: _stat(p, False) for p in cfg["dirs"]}
    out["files"] = {p: _stat(p, True) for p in cfg["files"]}
    out["exists"] = {p: os.path.lexists(p) for p in cfg["exists"]}
    libs = sorted(glob.glob(os.path.join(cfg["venv"], "lib", "python3*", "site-packages")))
    if libs:
        for entry in sorted(os.listdir(libs[-1])):
            if entry.endswith(".dist-info"):
                name, _, version = entry[: -len(".dist-info")].partition("-")
                out["dists"].append(re.sub(r"[-_.]+", "-", name.lower()) + "==" + version.lower())
                if name.lower() == "pdfleet":
                    out["wheel_bad"] = _wheel_bad(libs[-1], entry)
    out["unit"] = _unit(cfg["unit"])
    print(json.dumps(out))


main()
