"""The pdfleet_monitoring role's one probe of the host (pdfleet_probe: settings on stdin).

Prints JSON: whether the prometheus package is installed (one dpkg-query), each file the role writes as
{sha256, mode, owner, group} or null, prometheus.service's enabled/active state, and what differs from the wanted
state (the settings' "want"; differs() below), by the task of tasks/apply.yml that puts it back, so a converged
host costs one round trip and the role's tasks run only for what differs. Changes nothing.
"""

from __future__ import annotations

import json
import sys

from pdfleet_probe_common import debs_missing, stat_of, unit_state

# The entries of "differs", each gating one task of tasks/apply.yml (when: __pdfleet_monitoring_differs['<entry>']).
DIFFERS = ("package", "rules", "config", "defaults", "running")
# The entries that are files the role writes: want.paths and want.files name them so.
FILES = ("rules", "config", "defaults")


def differs(cfg: dict, found: dict) -> dict[str, bool]:
    """What differs between the wanted state (``cfg["want"]``) and what the probe found, by entry of DIFFERS.

    want: paths (each file's path, by entry), files (each file's {sha256, mode, owner, group}, by entry), unit
    (prometheus.service's wanted {enabled, active}).
      package   the prometheus package is not installed;
      rules, config, defaults  the file is missing or not as wanted;
      running   the unit is not enabled and active.
    """
    want = cfg["want"]
    out = {"package": not found["installed"], "running": found["unit"] != want["unit"]}
    out.update({name: found["files"].get(want["paths"][name]) != want["files"][name] for name in FILES})
    return {name: out[name] for name in DIFFERS}


def main() -> None:
    """Read the settings, look at the host, print what was found and what differs."""
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    found = {"installed": not debs_missing([cfg["package"]]),
             "files": {p: stat_of(p, digest=True) for p in cfg["files"]},
             "unit": unit_state(cfg["unit"])}
    print(json.dumps({**found, "differs": differs(cfg, found)}))


if __name__ == "__main__":
    main()
