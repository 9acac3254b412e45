"""The nvidia_driver role's one probe of a host (pdfleet_probe: settings on stdin; prints JSON).

In one round trip: the OS facts the role reads (distribution, version, OS family, running kernel), the Secure Boot
state, the machine id, the installed packages the role names for this distribution (settings: by_distribution, by
distribution name and release: prerequisites and packages, plus the running kernel's headers) or its hold
pattern covers, with their selection, and those of the pattern not held (one dpkg-query), the state of the files
the role writes (sha256, mode, owner), the repository's signing key as served now, the installed and the loaded kernel
module, the signs of a pending reboot, nvidia-persistenced's state and nvidia-smi's answer. Changes nothing.

What differs from the wanted state (settings: want) is decided here, by differs() and persistenced_differs(), in
"differs" (one entry per put-back task of tasks/repository.yml and tasks/install.yml, which runs only on its
entry) and "persistenced_differs" (tasks/converge.yml's nvidia-persistenced task).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
import sys
import urllib.request

from pdfleet_probe_common import os_facts, read_text, run, stat_of, unit_state

# The fields of a distribution's entry (the role's vars/<Distribution>.yml), empty.
NO_ENTRY = {"packages": [], "package_revision": "", "hold_regex": "", "pin_globs": [], "prerequisites": [],
            "releases": {}}

# The entries of "differs", each gating one task of tasks/repository.yml or tasks/install.yml.
DIFFERS = ("prerequisites", "keyring_dir", "key", "source", "pin", "blacklist_dir", "blacklist", "headers", "driver",
           "hold")


def pick(facts: dict, by_distribution: dict) -> tuple[str, str, dict]:
    """(entry, release, dist): this host's entry of by_distribution (its distribution's name) and its release (the
    distribution's version, else its major version, among the entry's releases: Ubuntu's 22.04, Debian's 12 of
    12.7); ("", "", {}) for a distribution or release the role does not support."""
    dist = by_distribution.get(facts["distribution"]) or {}
    releases = dist.get("releases") or {}
    for release in (facts["distribution_version"], facts["distribution_major_version"]):
        if release and release in releases:
            return facts["distribution"], release, dist
    return "", "", {}


def _key(url: str) -> dict:
    try:
        with urllib.request.urlopen(url, timeout=30, context=ssl.create_default_context()) as resp:
            body = resp.read().decode()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        return {"content": None, "error": f"{url}: {exc}"}
    return {"content": body, "sha256": hashlib.sha256(body.encode()).hexdigest(), "error": ""}


def _module_info(modinfo: str) -> dict:
    """The installed nvidia module's version and licence from one `modinfo nvidia` ("key: value" lines; the first
    of each key; empty where there is no module)."""
    fields: dict = {}
    for line in run([modinfo, "nvidia"])["stdout"].splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return {"module_version": fields.get("version", ""), "module_license": fields.get("license", "")}


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """Which of DIFFERS the host does not have as wanted (cfg["want"]), from what the probe found (pure).

    want: version (the pinned driver version; the packages are wanted at it plus the entry's package_revision),
    dirs (entry -> {path, state}: a directory's {mode, owner, group}), files (entry -> {path, state}: a file's
    {sha256, mode, owner, group}; the key's sha256 is the key as served now, found["key"]) and pin_sha256 (the pin
    file's sha256 by distribution name: its content names that distribution's globs and revision). A key that
    could not be downloaded differs, so repository.yml runs and its check names the error; a distribution without
    an entry differs in everything that depends on the entry (the checks before a change stop the role there)."""
    want = cfg["want"]
    dist = found["dist"]
    packages = found["packages"]

    def dir_differs(entry: str) -> bool:
        return found["dirs"].get(want["dirs"][entry]["path"]) != want["dirs"][entry]["state"]

    def file_differs(entry: str, sha256: str | None = None) -> bool:
        spec = want["files"][entry]
        state = spec["state"] if sha256 is None else {**spec["state"], "sha256": sha256}
        return found["files"].get(spec["path"]) != state

    key = found.get("key") or {"error": "no key URL"}
    pin_sha256 = want["pin_sha256"].get(found["entry"])
    package_version = want["version"] + dist["package_revision"]
    return {
        "prerequisites": any(name not in packages for name in dist["prerequisites"]),
        "keyring_dir": dir_differs("keyring_dir"),
        "key": key["error"] != "" or file_differs("key", key["sha256"]),
        "source": file_differs("source"),
        "pin": pin_sha256 is None or file_differs("pin", pin_sha256),
        "blacklist_dir": dir_differs("blacklist_dir"),
        "blacklist": file_differs("blacklist"),
        "headers": "linux-headers-" + found["os"]["kernel"] not in packages,
        # every package installed, all at the one pinned version (none at all: differs, as for no entry)
        "driver": not dist["packages"] or any(name not in packages or packages[name]["version"] != package_version
                                              for name in dist["packages"]),
        "hold": len(found["unheld"]) > 0,
    }


def persistenced_differs(cfg: dict, found: dict) -> bool:
    """Whether nvidia-persistenced is wanted (want: persistenced) but not in its wanted state (want: unit, e.g.
    enabled and active); never in check mode before the pinned module is installed (it would not start)."""
    want = cfg["want"]
    at_pin = found["module_version"] == want["version"]
    return (bool(want["persistenced"]) and not (want["check_mode"] and not at_pin)
            and found.get("unit", {}) != want["unit"])


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    out: dict = {}
    if cfg.get("secure_boot_command"):
        out["secure_boot"] = run(cfg["secure_boot_command"])
    out["machine_id"] = (read_text("/etc/machine-id") or "").strip()
    rows = run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"])["stdout"].splitlines()
    installed = {w[0]: {"version": w[1], "want": w[2]}
                 for w in (r.split() for r in rows) if len(w) == 5 and w[4] == "installed"}
    # only what the role asks about: the named packages and those the hold pattern covers
    facts = os_facts()
    out["os"] = facts
    entry, release, dist = pick(facts, cfg.get("by_distribution", {}))
    out["supported"] = bool(dist)
    out["entry"], out["release"] = entry, release
    out["repo_distro"] = dist["releases"][release] if dist else ""  # NVIDIA's repository path: debian12, ubuntu2204
    out["dist"] = {**NO_ENTRY, **dist}  # what the role's tasks read, whole even for an unsupported distribution
    held = re.compile(dist["hold_regex"]) if dist.get("hold_regex") else None
    wanted = set(dist.get("prerequisites", []) + dist.get("packages", []))
    if dist:
        wanted.add("linux-headers-" + facts["kernel"])
    out["packages"] = {name: state for name, state in installed.items()
                       if name in wanted or (held is not None and held.match(name))}
    out["unheld"] = sorted(name for name, state in out["packages"].items()
                           if held is not None and held.match(name) and state["want"] != "hold")
    out["files"] = {p: stat_of(p, digest=True) for p in cfg.get("files", [])}
    out["dirs"] = {p: stat_of(p) for p in cfg.get("dirs", [])}
    out["exists"] = {p: os.path.exists(p) for p in cfg.get("exists", [])}
    if cfg.get("key_url"):
        out["key"] = _key(cfg["key_url"])
    out.update(_module_info(cfg["modinfo"]))
    out["loaded_version"] = (read_text(cfg["loaded_version_path"]) or "").strip()
    if cfg.get("unit"):
        out["unit"] = unit_state(cfg["unit"])
    if cfg.get("smi_query"):
        smi = run(["nvidia-smi", "--query-gpu=" + cfg["smi_query"], "--format=csv,noheader,nounits"])
        out["smi"] = {"rc": smi["rc"], "stdout_lines": smi["stdout"].splitlines(), "msg": smi["stderr"].strip()}
    out["differs"] = differs(cfg, out)
    out["persistenced_differs"] = persistenced_differs(cfg, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
