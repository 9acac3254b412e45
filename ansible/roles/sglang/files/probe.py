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

import json
import os
import sys

from pdfleet_probe_common import debs_missing, dists_of, purelib_of, read_text, record_bad, sha256_of, stat_of


def _file(path: str) -> dict | None:
    """Content, mode, owner and group of a small file the role writes; null when missing."""
    state = stat_of(path)
    if state is not None:
        state["content"] = read_text(path)
    return state


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out = {"debs_missing": debs_missing(cfg.get("debs") or []), "purelib": "", "dists": [], "conn_sha256": "",
           "files": {}, "wheel_ok": False, "wheel_bad": "not installed"}
    purelib = purelib_of(cfg["venv"])
    if purelib and os.path.isfile(os.path.join(cfg["venv"], "bin", "python")):
        out["purelib"] = purelib
        dists = dists_of(purelib)
        out["dists"] = sorted(dists)
        for dist, entry in dists.items():
            if dist.startswith("pdfleet=="):
                out["wheel_bad"] = record_bad(purelib, entry)
                out["wheel_ok"] = out["wheel_bad"] == ""
        conn = os.path.join(purelib, cfg["conn_file"])
        if os.path.isfile(conn):
            out["conn_sha256"] = sha256_of(conn).hexdigest()
        cfg["files"] = cfg.get("files", []) + [os.path.join(purelib, p) for p in cfg.get("purelib_files", [])]
    out["files"] = {path: _file(path) for path in cfg.get("files", [])}
    print(json.dumps(out))


main()
