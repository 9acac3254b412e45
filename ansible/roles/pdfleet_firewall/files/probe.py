"""The pdfleet_firewall role's one probe of the host (pdfleet_probe: settings on stdin).

Prints JSON: whether the nftables package is installed (one dpkg-query), the ruleset file as {sha256, mode, owner,
group} or null, whether the boot configuration holds the include line, whether the kernel has pdfleet's table
(`nft list table`), nftables.service's enabled/active state, the reserved ports (the kernel's
net.ipv4.ip_local_reserved_ports, the sysctl file that sets it at boot, and what both should hold: reserved()),
and what differs from the wanted state (the settings' "want"; differs() below), by the task of tasks/apply.yml that
puts it back. Changes nothing.
"""

from __future__ import annotations

import json
import sys

from pdfleet_probe_common import debs_missing, read_text, run, stat_of, unit_state

# The entries of "differs", each gating tasks of tasks/apply.yml (when: __pdfleet_firewall_differs['<entry>']).
DIFFERS = ("package", "ruleset", "include", "loaded", "boot", "reserved_file", "reserved_live")
SYSCTL_KEY = "net.ipv4.ip_local_reserved_ports"  # also holds for IPv6 (the kernel has one list)
SYSCTL_HEADER = ("# pdfleet: UCX's TCP port range kept out of the kernel's ephemeral allocation (port-0 binds),\n"
                 "# so UCX binds every port of it. From the plan (pdfleet.firewall.reserved_ports): do not edit.\n"
                 "# The kernel has one list: the value below keeps the host's own reservations too.\n")
OWN = "# pdfleet's own: "


def ports_of(text: str) -> set[int]:
    """The ports of a reserved-ports list ("40000-40999,50000"); an unreadable entry counts as none."""
    out: set[int] = set()
    for item in text.replace("\n", ",").split(","):
        first, _, last = item.strip().partition("-")
        if first.isdigit() and (not last or last.isdigit()):
            out.update(range(int(first), int(last or first) + 1))
    return out


def list_of(ports: set[int]) -> str:
    """Ports as the kernel writes the list: ascending, runs as first-last, comma-separated."""
    runs: list[list[int]] = []
    for port in sorted(ports):
        if runs and port == runs[-1][1] + 1:
            runs[-1][1] = port
        else:
            runs.append([port, port])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def reserved(want: str, live: str | None, file_text: str | None) -> dict:
    """What the kernel's list and the sysctl file should hold: the host's own reservations (the live list less what
    our file reserved before and the plan no longer does) plus the plan's ranges. The kernel has one list, so the
    file sets all of it (the host's reservations kept) and names pdfleet's own part on its OWN line; the file only
    while the plan reserves something. {want_live: the list to write, file: the file's wanted text or null}."""
    ours_before: set[int] = set()
    for line in (file_text or "").splitlines():
        if line.startswith(OWN):
            ours_before = ports_of(line[len(OWN):])
    planned = ports_of(want)
    others = ports_of(live or "") - (ours_before - planned)
    listed = list_of(others | planned)
    text = f"{SYSCTL_HEADER}{OWN}{list_of(planned)}\n{SYSCTL_KEY} = {listed}\n"
    return {"want_live": listed, "file": text if planned else None}


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs between the wanted state (``cfg["want"]``) and what the probe found, by entry of DIFFERS.

    want: present (the host should have pdfleet's firewall), file (the ruleset file's {sha256, mode, owner, group},
    null when it should be absent).
      package  the firewall is wanted and nftables is not installed;
      ruleset  the file is not as wanted (missing, changed, or there when it should be gone);
      include  the boot configuration's include line is missing, or there when it should be gone;
      loaded   the kernel lacks the table, or has it when it should be gone;
      boot     the firewall is wanted and nftables.service is not enabled.
      reserved_file  the sysctl file that reserves the UCX range at boot is not as reserved() wants it;
      reserved_live  the kernel's reserved ports are not as reserved() wants them.
    The reserved ports are the plan's whatever the firewall's present (the reservation keeps UCX's ports free).
    """
    want = cfg["want"]
    present = bool(want["present"])
    out = {"package": present and not found["installed"],
           "ruleset": found["file"] != want["file"],
           "include": found["include"] != present,
           "loaded": found["table"] != present,
           "boot": present and found["unit"]["enabled"] != "enabled",
           "reserved_file": found["reserved"]["file_text"] != found["reserved"]["file"],
           "reserved_live": ports_of(found["reserved"]["live"] or "") != ports_of(found["reserved"]["want_live"])}
    return {name: out[name] for name in DIFFERS}


def main() -> None:
    """Read the settings, look at the host, print what was found and what differs."""
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    conf = read_text(cfg["conf"]) or ""
    found = {"installed": not debs_missing([cfg["package"]]),
             "file": stat_of(cfg["path"], digest=True),
             "include": cfg["include"] in (line.strip() for line in conf.splitlines()),
             # rc 0: the table exists; nft missing (rc 127) or no such table: it does not
             "table": run(["nft", "list", "table", "inet", cfg["table"]])["rc"] == 0,
             "unit": unit_state(cfg["unit"])}
    live = read_text(cfg["reserved_proc"])
    file_text = read_text(cfg["reserved_path"])
    found["reserved"] = {"live": None if live is None else live.strip(), "file_text": file_text,
                         **reserved(cfg["want"]["reserved_ports"], live, file_text)}
    print(json.dumps({**found, "differs": differs(cfg, found)}))


if __name__ == "__main__":
    main()
