"""What every role's probe needs, sent with each probe by the pdfleet.cluster.pdfleet_probe action.

The action registers this source as the module ``pdfleet_probe_common`` on the host before it runs a role's
``files/*.py``, so a probe imports it (``from pdfleet_probe_common import stat_of``) and stays one remote
command. Only the standard library is used: it runs with whatever Python 3 the host has. Read-only.
"""

from __future__ import annotations

import base64
import glob
import grp
import hashlib
import os
import pwd
import re
import subprocess


def owner_group(st: os.stat_result) -> tuple[str, str]:
    """Owner and group names of a stat result; the number itself for an id with no name (a deleted user or
    group), never a crash."""
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return owner, group


def sha256_of(path: str) -> hashlib._Hash:
    """The sha256 of a file, read in 1-MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h


def stat_of(path: str, digest: bool = False) -> dict | None:
    """{mode, owner, group} of a path, with its sha256 when ``digest`` ("" for what is not a regular file);
    None when it does not exist or cannot be read."""
    try:
        st = os.stat(path)
        owner, group = owner_group(st)
        out = {"mode": "%04o" % (st.st_mode & 0o7777), "owner": owner, "group": group}
        if digest:
            out["sha256"] = sha256_of(path).hexdigest() if os.path.isfile(path) else ""
    except OSError:
        return None
    return out


def read_text(path: str) -> str | None:
    """A file's text; None when it is missing or unreadable."""
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def run(argv: list[str], timeout: float = 120) -> dict:
    """{rc, stdout, stderr} of a command; rc 127 and the reason when it cannot run or times out."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"rc": 127, "stdout": "", "stderr": str(exc)}
    return {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}


def installed_packages() -> dict[str, str]:
    """{package: version} of every installed .deb (one dpkg-query; empty where there is no dpkg)."""
    rows = run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    return {w[0]: w[1] for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"}


def debs_missing(debs: list[str]) -> list[str]:
    """The packages of ``debs`` that are not installed, in their order."""
    installed = installed_packages() if debs else {}
    return [d for d in debs if d not in installed]


def unit_state(name: str) -> dict[str, str]:
    """A systemd unit's {enabled, active}, as `systemctl is-enabled` and `is-active` name them, from one `systemctl
    show` ("unknown" where systemctl says nothing: no such unit file, no systemd)."""
    props = dict(line.split("=", 1) for line in run(["systemctl", "show", "-p", "UnitFileState,ActiveState", name])
                 ["stdout"].splitlines() if "=" in line)
    return {"enabled": props.get("UnitFileState", "").strip() or "unknown",
            "active": props.get("ActiveState", "").strip() or "unknown"}


def purelib_of(venv: str) -> str:
    """A virtualenv's site-packages ("" when there is none)."""
    libs = sorted(glob.glob(os.path.join(venv, "lib", "python3*", "site-packages")))
    return libs[-1] if libs else ""


def dists_of(purelib: str) -> dict[str, str]:
    """{normalised "name==version": dist-info directory} of the distributions installed in site-packages."""
    out = {}
    for entry in sorted(os.listdir(purelib)) if purelib else []:
        if entry.endswith(".dist-info"):
            name, _dash, version = entry[: -len(".dist-info")].partition("-")
            out[re.sub(r"[-_.]+", "-", name.lower()) + "==" + version.lower()] = entry
    return out


def pin_key(spec: str) -> str:
    """A pin "Name_x==1.0" as dists_of names it: lower case, each run of "-", "_" or "." in the name as one "-"
    (PEP 503). A spec that is not "name==version" is returned lower-cased only (it matches no installed one)."""
    name, sep, version = spec.lower().partition("==")
    return re.sub(r"[-_.]+", "-", name) + sep + version if sep else spec.lower()


def record_bad(purelib: str, dist_info: str) -> str:
    """The first file of an installed distribution missing or not at the sha256 its RECORD names ("" when all
    match; pip writes urlsafe base64 without padding): a hand edit on the host shows as drift."""
    record = read_text(os.path.join(purelib, dist_info, "RECORD"))
    if record is None:
        return f"{dist_info}/RECORD (missing)"
    for line in record.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) != 3 or not parts[1].startswith("sha256="):
            continue
        path = os.path.normpath(os.path.join(purelib, parts[0]))
        if not os.path.isfile(path):
            return f"{path} (missing)"
        digest = base64.urlsafe_b64encode(sha256_of(path).digest()).rstrip(b"=").decode()
        if digest != parts[1][len("sha256="):]:
            return f"{path} (sha256 differs from the RECORD)"
    return ""


def user_of(name: str) -> dict | None:
    """A user's primary group, home, shell and supplementary groups; None when there is no such user."""
    try:
        u = pwd.getpwnam(name)
    except KeyError:
        return None
    groups = grp.getgrall()
    primary = next((g.gr_name for g in groups if g.gr_gid == u.pw_gid), str(u.pw_gid))
    return {"group": primary, "home": u.pw_dir, "shell": u.pw_shell,
            "groups": sorted(g.gr_name for g in groups if name in g.gr_mem)}


def group_of(name: str) -> str | None:
    """The group's name when it exists."""
    try:
        return grp.getgrnam(name).gr_name
    except KeyError:
        return None


# os-release ID -> Ansible's distribution name (the names the roles key their per-distribution settings by).
DISTRIBUTION_NAMES = {"debian": "Debian", "ubuntu": "Ubuntu"}


def os_facts() -> dict[str, str]:
    """The few OS facts the roles read, named as Ansible's facts are: distribution, distribution_version (Debian's
    point release from /etc/debian_version, as Ansible reads it), distribution_major_version, os_family, kernel."""
    rel: dict[str, str] = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        text = read_text(path)
        if text is not None:
            for line in text.splitlines():
                key, sep, value = line.strip().partition("=")
                if sep:
                    rel[key] = value.strip().strip('"').strip("'")
            break
    ident = rel.get("ID", "").lower()
    version = rel.get("VERSION_ID", "")
    point = (read_text("/etc/debian_version") or "").strip() if ident == "debian" else ""
    if point[:1].isdigit():
        version = point
    like = (rel.get("ID_LIKE", "") + " " + ident).split()
    return {"distribution": DISTRIBUTION_NAMES.get(ident, rel.get("NAME", ident or "unknown")),
            "distribution_version": version, "distribution_major_version": version.split(".")[0],
            "os_family": "Debian" if "debian" in like or "ubuntu" in like else rel.get("NAME", "unknown"),
            "kernel": os.uname().release}


# A requirement line of a hash lock (tests/lint/locks.py writes them): name[extras]==version (the extras a dependant
# asks for: pip's hash-checking mode wants them pinned too), an optional python_version marker after " ; ", and a
# line continuation.
LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[(?P<extras>[A-Za-z0-9._,-]+)\])?==(?P<version>\S+?)"
                       r"(?: ; (?P<marker>.*?))? \\$")


def file_state(path: str) -> dict | None:
    """Content, mode, owner and group of a small file a role writes; null when missing."""
    state = stat_of(path)
    if state is not None:
        state["content"] = read_text(path)
    return state


def wanted_state(want: dict) -> dict:
    """The {content, mode, owner, group} of a wanted file's state (file_state reports the same keys)."""
    return {key: want[key] for key in ("content", "mode", "owner", "group")}


def minor_of(site_packages: str) -> str:
    """"3.11" from ".../lib/python3.11/site-packages" ("" when there is none)."""
    name = os.path.basename(os.path.dirname(site_packages)) if site_packages else ""
    return name[len("python"):] if name.startswith("python3.") else ""


def lock_missing(lock_text: str, python: str, dists: set) -> list[str]:
    """The requirements of a hash lock's text that apply to CPython ``python`` ("3.11": no marker, or a marker that
    names it) and are not among ``dists``, normalised (pin_key), in the lock's order."""
    out = []
    for line in lock_text.splitlines():
        m = LOCK_LINE.match(line)
        if m is None or (m["marker"] and python not in re.findall(r'python_version == "([0-9.]+)"', m["marker"])):
            continue
        pin = pin_key(f"{m['name']}=={m['version']}")
        if pin not in dists and pin not in out:  # a package locked plain and with extras is one distribution
            out.append(pin)
    return out


def lock_state(venv_lock: dict) -> dict:
    """A venv against its hash lock (venv, lock: path, content, mode, owner, group): {python: the venv's Python
    minor version ("" when there is no venv), missing: the lock's requirements for that Python not installed,
    differs: no venv, the lock file on the host is not the wanted one, or a requirement is missing}."""
    lock = venv_lock["lock"]
    purelib = purelib_of(venv_lock["venv"])
    python = minor_of(purelib) if purelib and os.path.isfile(os.path.join(venv_lock["venv"], "bin", "python")) else ""
    missing = lock_missing(lock["content"], python, set(dists_of(purelib))) if python else []
    return {"python": python, "missing": missing,
            "differs": not python or file_state(lock["path"]) != wanted_state(lock) or len(missing) > 0}
