"""The few facts the role reads (distribution, its version, the OS family, the running kernel), when the play
gathered none: one read of /etc/os-release (and /etc/debian_version) and uname, named as Ansible's facts are.

Run by pdfleet_probe (read-only): settings on stdin (none needed), one JSON document on stdout.
"""

import json
import os
import sys

# os-release ID -> Ansible's distribution name; the role supports these (vars/Debian.yml, vars/Ubuntu.yml).
NAMES = {"debian": "Debian", "ubuntu": "Ubuntu"}


def _os_release() -> dict:
    out = {}
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            with open(path) as f:
                for line in f:
                    key, sep, value = line.strip().partition("=")
                    if sep:
                        out[key] = value.strip().strip('"').strip("'")
            return out
        except OSError:
            continue
    return out


def main() -> None:
    sys.stdin.readline()
    rel = _os_release()
    ident = rel.get("ID", "").lower()
    version = rel.get("VERSION_ID", "")
    if ident == "debian":  # Ansible reads the point release from /etc/debian_version (12.8, not 12)
        try:
            with open("/etc/debian_version") as f:
                point = f.read().strip()
            if point[:1].isdigit():
                version = point
        except OSError:
            pass
    like = (rel.get("ID_LIKE", "") + " " + ident).split()
    print(json.dumps({"distribution": NAMES.get(ident, rel.get("NAME", ident or "unknown")),
                      "distribution_version": version, "distribution_major_version": version.split(".")[0],
                      "os_family": "Debian" if "debian" in like or "ubuntu" in like else rel.get("NAME", "unknown"),
                      "kernel": os.uname().release}))


main()
