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
  sim_missing    the pins of settings want.sim (SGLang and its sim requirements) not installed, normalised (sim mode)
  router         (settings "router": the gateway's venv, and its hash lock's path and wanted state) {python: the
                 venv's Python minor version ("" when there is no venv), missing: the lock's requirements for that
                 Python not installed (lock_missing), differs: no venv, the lock file on the host is not the wanted
                 one, or a requirement is missing}; null without those settings
  service        the same of the service venv and its hash lock (settings "service": pypi mode); null without
  differs        which task of tasks/apply.yml has something to put back (differs(): one entry of DIFFERS each)
  patch          what tasks/patch.yml is for, as far as the probe can tell (patch_differs()): "conn_missing" (no
                 conn.py to hash), "conn" (conn.py is not the wanted file), "record" (the record file differs)
differs and patch compare what was found with the wanted state, settings "want" (data: the install mode, the pins,
the states of the files the role writes, conn.py's sha256 and the record's fields); without "want" (the entry point
`python`) nothing is compared and all are false.
Nothing is changed on the host.
"""

import glob
import json
import os
import re
import subprocess
import sys

from pdfleet_probe_common import (
    debs_missing,
    dists_of,
    file_state,
    lock_state,
    minor_of,
    pin_key,
    purelib_of,
    record_bad,
    sha256_of,
    wanted_state,
)

# The entries of "differs", one per task of tasks/apply.yml (vars/main.yml: __sglang_differs).
DIFFERS = ("debs", "venv", "pypi_stack", "pth", "sim_stack", "wheel", "stray_router")
# The router packages (the router runs from a venv of its own, never the service venv: tasks/main.yml).
ROUTER_DISTS = ("sglang-router", "smg")
# The entries of "patch" (vars/main.yml: __sglang_rehash, __sglang_record_differs, __sglang_patch_differs).
PATCH = ("conn_missing", "conn", "record")
# Where the sim mode's .pth file goes in the venv's site-packages.
PTH = "pdfleet-runtime.pth"


def _python(cfg: dict, purelib: str) -> dict:
    """The Python that pip installs the pin for, the host's glibc and the sim runtime's Python."""
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""  # "glibc 2.36"
    out = {"python": "", "python_from": "", "python_error": "",
           "glibc": libc.split()[-1] if libc.startswith("glibc ") else ""}
    if purelib:
        out["python"], out["python_from"] = minor_of(purelib), "the service venv " + cfg["venv"]
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
        out["runtime_python"] = minor_of(libs[-1]) if libs else ""
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


def record_content(fields: dict, purelib: str, conn_file: str) -> str:
    """The record's text as tasks/patch.yml writes it: the wanted fields and the file (conn.py's path in the venv)
    as Ansible's to_nice_json(sort_keys=true) prints them, and a newline."""
    record = dict(fields, file=f"{purelib}/{conn_file}")
    return json.dumps(record, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def sim_missing(cfg: dict, found: dict) -> list[str]:
    """The pins of want.sim not installed, normalised as dists_of names the installed ones (pin_key), in order; empty
    without "want" or outside sim mode."""
    want = cfg["want"]
    if want["install_mode"] != "sim":
        return []
    return [pin for pin in map(pin_key, want["sim"]) if pin not in found["dists"]]


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """Which entries differ on the host (DIFFERS), from the settings' "want" and what the probe found:
    debs        a prerequisite .deb is not installed
    venv        there is no venv (no site-packages with a bin/python)
    pypi_stack  pypi mode, and a pin of want.pypi (SGLang) is not installed, or the venv differs from its hash lock
                (found "service": the lock file on the host, or a locked requirement missing)
    pth         sim mode, and <site-packages>/pdfleet-runtime.pth is not want.pth (content, mode, owner, group)
    sim_stack   sim mode, and a pin of want.sim is not installed (sim_missing)
    wheel       sim mode, and a sim wheel is not installed or a file of it is off its RECORD, or the marker file
                (want.wheel_marker: path and state) is not the wanted one
    stray_router  a router package (ROUTER_DISTS) is installed in the service venv (where the bundle installed it
                before the router had a venv of its own)
    Pins compare as dists_of names the installed distributions (pin_key)."""
    want = cfg["want"]
    sim, pypi = want["install_mode"] == "sim", want["install_mode"] == "pypi"
    dists, files, purelib = set(found["dists"]), found["files"], found["purelib"]
    marker = want["wheel_marker"]
    wheel_stale = not found["wheel_ok"] or files.get(marker["path"]) != wanted_state(marker)
    return {"debs": len(found["debs_missing"]) > 0,
            "venv": (sim or pypi) and not purelib,
            "pypi_stack": pypi and (any(pin_key(pin) not in dists for pin in want["pypi"])
                                    or (found.get("service") or {}).get("differs", False)),
            "pth": sim and files.get(f"{purelib}/{PTH}") != wanted_state(want["pth"]),
            "sim_stack": sim and len(sim_missing(cfg, found)) > 0,
            "wheel": sim and wheel_stale,
            "stray_router": any(d.partition("==")[0] in ROUTER_DISTS for d in found["dists"])}


def patch_differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What the probe can tell of tasks/patch.yml's work (PATCH; the pip tasks of this run decide the rest, in
    vars/main.yml):
    conn_missing  conn.py was not hashed (no venv or no such file): it is hashed again after the install
    conn          conn.py's sha256 is not want.conn_sha256 (the patched file, or the pristine one unpatched)
    record        the record file (want.record: path, mode, owner, group and the fields) is not the wanted one:
                  its content is record_content() of the fields and conn.py's path under the probe's site-packages"""
    want = cfg["want"]
    record = want["record"]
    wanted = {"content": record_content(record["fields"], found["purelib"], cfg.get("conn_file", "")),
              "mode": record["mode"], "owner": record["owner"], "group": record["group"]}
    return {"conn_missing": found["conn_sha256"] == "",
            "conn": found["conn_sha256"] != want["conn_sha256"],
            "record": found["files"].get(record["path"]) != wanted}


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
        conn = os.path.join(purelib, cfg.get("conn_file", ""))
        if cfg.get("conn_file") and os.path.isfile(conn):
            out["conn_sha256"] = sha256_of(conn).hexdigest()
        cfg["files"] = cfg.get("files", []) + [f"{purelib}/{p}" for p in cfg.get("purelib_files", [])]
    out["files"] = {path: file_state(path) for path in cfg.get("files", [])}
    out["python"] = _python(cfg, out["purelib"])
    out["router"] = lock_state(cfg["router"]) if cfg.get("router") else None
    out["service"] = lock_state(cfg["service"]) if cfg.get("service") else None
    if "want" in cfg:  # without a wanted state (the entry point `python`) there is no verdict, never a silent one
        out["sim_missing"] = sim_missing(cfg, out)
        out["router_dists"] = [d.partition("==")[0] for d in out["dists"] if d.partition("==")[0] in ROUTER_DISTS]
        out["differs"] = differs(cfg, out)
        out["patch"] = patch_differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
