"""Whether this run may reboot the host: the loaded module's version and the signs of a pending reboot.

may_reboot is true when the loaded module is not the pinned version (settings: version), or the distribution
asks for a reboot (/var/run/reboot-required), or nouveau is loaded.

Run by pdfleet_probe (read-only): settings on stdin, one JSON document on stdout.
"""

import json
import os
import sys


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    try:
        with open(cfg["loaded_version_path"]) as f:
            loaded = f.read().strip()
    except OSError:
        loaded = ""
    reboot_required = os.path.exists("/var/run/reboot-required")
    nouveau = os.path.exists("/sys/module/nouveau")
    print(json.dumps({"loaded": loaded, "reboot_required": reboot_required, "nouveau": nouveau,
                      "may_reboot": loaded != cfg["version"] or reboot_required or nouveau}))


main()
