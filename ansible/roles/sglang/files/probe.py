"""The sglang role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON).

Everything the role's no-op path needs in one round trip, instead of a module call per item:
  debs_missing   the prerequisite .deb packages not installed (one dpkg-query)
  purelib        the service venv's site-packages ("" when there is no venv yet)
  dists          the distributions installed in the venv itself, as normalised "name==version"
  conn_sha256    sha256 of SGLang's conn.py in the venv ("" when missing)
  files          {path: {content, mode, owner, group} or null} of the small files the role writes
                 (record, .pth, wheel marker)
  wheel_ok       every wheel of settings "wheel_dists" (sim mode: pdfleet and pdfleet-sim) is installed and its
                 files all match the hashes of its RECORD (hand edits show)
  wheel_bad      else the first that is not installed ("<dist>: not installed"), or its first file that does not
                 match
  python         {python, python_from, glibc, runtime_python, python_error}: the Python minor version of the
                 service venv's interpreter, or (no venv yet) of the interpreter that will make it (settings
                 "python", run once); the host's glibc; in sim mode the prepared CPU runtime's Python. The role
                 refuses a host whose Python cannot install the pin (pdfleet_python_problems) from this.
Nothing is changed on the host.
"""

import glob
import json
import os
import re
import subprocess
import sys

from pdfleet_probe_common import debs_missing, dists_of, purelib_of, read_text, record_bad, sha256_of, stat_of


def _file(path: str) -> dict | None:
    """Content, mode, owner and group of a small file the role writes; null when missing."""
    state = stat_of(path)
    if state is not None:
        state["content"] = read_text(path)
    return state


def _minor_of(site_packages: str) -> str:
    """"3.11" from ".../lib/python3.11/site-packages" ("" when there is none)."""
    name = os.path.basename(os.path.dirname(site_packages)) if site_packages else ""
    return name[len("python"):] if name.startswith("python3.") else ""


def _python(cfg: dict, purelib: str) -> dict:
    """The Python that pip installs the pin for, the host's glibc and the sim runtime's Python."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    out = {"python": "", "python_from": "", "python_error": "",
           "glibc": libc.split()[-1] if libc.startswith("glibc ") else ""}
    if purelib:
        out["python"], out["python_from"] = _minor_of(purelib), "the service venv " + cfg["venv"]
    elif cfg.get("python"):
        out["python_from"] = "sglang_python " + cfg["python"]
        try:
            proc = subprocess.run([cfg["python"], "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                                  capture_output=True, text=True, timeout=60, check=False)
            out["python"] = proc.stdout.strip() if proc.returncode == 0 else ""
            out["python_error"] = "" if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")
        except (OSError, subprocess.TimeoutExpired) as exc:
            out["python_error"] = str(exc)
    if cfg.get("runtime"):
        libs = sorted(glob.glob(os.path.join(cfg["runtime"], "lib", "python3*", "site-packages")))
        out["runtime_python"] = _minor_of(libs[-1]) if libs else ""
    return out


def _wheels_bad(purelib: str, dists: dict, names: list) -> str:
    """The first of the wheels `names` not installed or with a file off its RECORD ("" when all are good)."""
    if not names:
        return "not installed"
    for name in names:
        wanted = re.sub(r"[-_.]+", "-", name.lower()) + "=="
        entry = next((e for dist, e in dists.items() if dist.startswith(wanted)), None)
        bad = f"{name}: not installed" if entry is None else record_bad(purelib, entry)
        if bad:
            return bad
    return ""


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out = {"debs_missing": debs_missing(cfg.get("debs") or []), "purelib": "", "dists": [], "conn_sha256": "",
           "files": {}, "wheel_ok": False, "wheel_bad": "not installed"}
    purelib = purelib_of(cfg["venv"])
    if purelib and os.path.isfile(os.path.join(cfg["venv"], "bin", "python")):
        out["purelib"] = purelib
        dists = dists_of(purelib)
        out["dists"] = sorted(dists)
        out["wheel_bad"] = _wheels_bad(purelib, dists, cfg.get("wheel_dists") or [])
        out["wheel_ok"] = out["wheel_bad"] == ""
        conn = os.path.join(purelib, cfg["conn_file"])
        if os.path.isfile(conn):
            out["conn_sha256"] = sha256_of(conn).hexdigest()
        cfg["files"] = cfg.get("files", []) + [os.path.join(purelib, p) for p in cfg.get("purelib_files", [])]
    out["files"] = {path: _file(path) for path in cfg.get("files", [])}
    out["python"] = _python(cfg, out["purelib"])
    print(json.dumps(out))


main()
