"""The sglang role's one look at a host (pdfleet_probe: settings on stdin; prints JSON).

Everything the role's no-op path needs in one round trip, instead of a module call per item:
  debs_missing   the prerequisite .deb packages not installed (one dpkg-query)
  purelib        the service venv's site-packages ("" when there is no venv yet)
  dists          the distributions installed in the venv itself, as normalised "name==version"
  conn_sha256    sha256 of SGLang's conn.py in the venv ("" when missing)
  files          {path: {content, mode, owner, group} or null} of the small files the role writes
                 (record, .pth, wheel marker)
  wheel_ok       the installed pdfleet wheel's files all match the hashes of its RECORD (hand edits show)
  wheel_bad      else the first file that does not (or "not installed")
Nothing is changed on the host.
"""

from __future__ import annotations

import base64
import glob
import grp
import hashlib
import json
import os
import pwd
import re
import subprocess
import sys


def _names(uid: int, gid: int) -> tuple[str, str]:
    """Owner and group names; the number itself for an id with no name (a deleted user), never a crash."""
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return owner, group


def _norm(name: str, version: str) -> str:
    return re.sub(r"[-_.]+", "-", name.lower()) + "==" + version.lower()


def _sha256(path: str) -> hashlib._Hash:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _file(path: str) -> dict | None:
    """Content, mode, owner and group of a small file the role writes; null when missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return {"content": _read(path), "mode": "%04o" % (st.st_mode & 0o7777),
            "owner": _names(st.st_uid, st.st_gid)[0], "group": _names(st.st_uid, st.st_gid)[1]}


def _record_bad(purelib: str, dist_info: str) -> str:
    """The first file of the RECORD missing or not at its recorded sha256 ("" when all match; pip writes
    urlsafe base64 without padding)."""
    record = _read(os.path.join(purelib, dist_info, "RECORD"))
    if record is None:
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


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out = {"debs_missing": [], "purelib": "", "dists": [], "conn_sha256": "", "files": {}, "wheel_ok": False,
           "wheel_bad": "not installed"}
    if cfg.get("debs"):
        proc = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${db:Status-Status}\n", *cfg["debs"]],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        installed = {w[0] for w in (line.split() for line in proc.stdout.splitlines())
                     if len(w) == 2 and w[1] == "installed"}
        out["debs_missing"] = [d for d in cfg["debs"] if d not in installed]
    libs = sorted(glob.glob(os.path.join(cfg["venv"], "lib", "python3*", "site-packages")))
    if libs and os.path.isfile(os.path.join(cfg["venv"], "bin", "python")):
        purelib = out["purelib"] = libs[-1]
        for entry in sorted(os.listdir(purelib)):
            if entry.endswith(".dist-info"):
                name, _, version = entry[: -len(".dist-info")].partition("-")
                out["dists"].append(_norm(name, version))
                if name.lower() == "pdfleet":
                    out["wheel_bad"] = _record_bad(purelib, entry)
                    out["wheel_ok"] = out["wheel_bad"] == ""
        conn = os.path.join(purelib, cfg["conn_file"])
        if os.path.isfile(conn):
            out["conn_sha256"] = _sha256(conn).hexdigest()
        cfg["files"] = cfg.get("files", []) + [os.path.join(purelib, p) for p in cfg.get("purelib_files", [])]
    out["files"] = {path: _file(path) for path in cfg.get("files", [])}
    print(json.dumps(out))


main()
