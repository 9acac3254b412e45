"""The nvidia_driver role's one look at a host (pdfleet_probe: settings on stdin; prints JSON).

In one round trip: the Secure Boot state, the machine id, every installed package with its selection (one
dpkg-query), the state of the files the role writes (sha256, mode, owner), the repository's signing key as
served now, the installed and the loaded kernel module, the signs of a pending reboot, nvidia-persistenced's
state and nvidia-smi's answer. Each task of the role then runs only for what differs. Changes nothing.
"""

from __future__ import annotations

import grp
import hashlib
import json
import os
import pwd
import ssl
import subprocess
import sys
import urllib.request


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


def _run(argv: list[str]) -> dict:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def _stat(path: str, digest: bool) -> dict | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    owner, group = _names(st.st_uid, st.st_gid)
    out = {"mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}
    if digest:
        with open(path, "rb") as f:
            out["sha256"] = hashlib.sha256(f.read()).hexdigest()
    return out


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _key(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=30, context=ssl.create_default_context()) as resp:
            body = resp.read().decode()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return {"content": None, "error": f"{url}: {exc}"}
    return {"content": body, "sha256": hashlib.sha256(body.encode()).hexdigest(), "error": ""}


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {}
    if cfg.get("secure_boot_command"):
        out["secure_boot"] = _run(cfg["secure_boot_command"])
    out["machine_id"] = (_read("/etc/machine-id") or "").strip()
    rows = _run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    out["packages"] = {w[0]: {"version": w[1], "want": w[2]}
                       for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"}
    out["files"] = {p: _stat(p, True) for p in cfg.get("files", [])}
    out["dirs"] = {p: _stat(p, False) for p in cfg.get("dirs", [])}
    out["exists"] = {p: os.path.exists(p) for p in cfg.get("exists", [])}
    if cfg.get("key_url"):
        out["key"] = _key(cfg["key_url"])
    modinfo = cfg["modinfo"]
    out["module_version"] = _run([modinfo, "-F", "version", "nvidia"])["stdout"].strip()
    out["module_license"] = _run([modinfo, "-F", "license", "nvidia"])["stdout"].strip()
    out["loaded_version"] = (_read(cfg["loaded_version_path"]) or "").strip()
    if cfg.get("unit"):
        states = [_run(["systemctl", verb, cfg["unit"]])["stdout"].strip() for verb in ("is-enabled", "is-active")]
        out["unit"] = {"enabled": states[0], "active": states[1]}
    if cfg.get("smi_query"):
        smi = _run(["nvidia-smi", "--query-gpu=" + cfg["smi_query"], "--format=csv,noheader,nounits"])
        out["smi"] = {"rc": smi["rc"], "stdout_lines": smi["stdout"].splitlines(), "msg": smi["stderr"].strip()}
    print(json.dumps(out))


main()
