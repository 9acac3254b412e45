"""The pdfleet_firewall role's one probe of the host (pdfleet_probe: settings on stdin).

Prints JSON: whether the nftables package is installed (one dpkg-query), the ruleset file as {sha256, mode, owner,
group} or null, whether the boot configuration holds the include line, whether the kernel has pdfleet's table
(`nft list table`), nftables.service's enabled/active state, and what differs from the wanted state (the
settings' "want"; differs() below), by the task of tasks/apply.yml that puts it back. Changes nothing.
"""

from __future__ import annotations

import json
import sys

from pdfleet_probe_common import debs_missing, read_text, run, stat_of, unit_state

# The entries of "differs", each gating tasks of tasks/apply.yml (when: __pdfleet_firewall_differs['<entry>']).
DIFFERS = ("package", "ruleset", "include", "loaded", "boot")


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs between the wanted state (``cfg["want"]``) and what the probe found, by entry of DIFFERS.

    want: present (the host should have pdfleet's firewall), file (the ruleset file's {sha256, mode, owner, group},
    null when it should be absent).
      package  the firewall is wanted and nftables is not installed;
      ruleset  the file is not as wanted (missing, changed, or there when it should be gone);
      include  the boot configuration's include line is missing, or there when it should be gone;
      loaded   the kernel lacks the table, or has it when it should be gone;
      boot     the firewall is wanted and nftables.service is not enabled.
    """
    want = cfg["want"]
    present = bool(want["present"])
    out = {"package": present and not found["installed"],
           "ruleset": found["file"] != want["file"],
           "include": found["include"] != present,
           "loaded": found["table"] != present,
           "boot": present and found["unit"]["enabled"] != "enabled"}
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
    print(json.dumps({**found, "differs": differs(cfg, found)}))


if __name__ == "__main__":
    main()
