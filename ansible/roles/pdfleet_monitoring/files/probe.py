"""The pdfleet_monitoring role's one probe of the host (pdfleet_probe: settings on stdin).

Prints JSON: whether the prometheus package is installed (one dpkg-query), each file the role writes as
{sha256, mode, owner, group} or null, and prometheus.service's enabled/active state, so a converged host costs
one round trip and the role's tasks run only for what differs. Changes nothing.
"""

import json
import sys

from pdfleet_probe_common import debs_missing, stat_of, unit_state


def main() -> None:
    cfg = json.loads(sys.stdin.readline())  # settings: one JSON line on stdin (pdfleet_probe)
    print(json.dumps({"installed": not debs_missing([cfg["package"]]),
                      "files": {p: stat_of(p, digest=True) for p in cfg["files"]},
                      "unit": unit_state(cfg["unit"])}))


main()
