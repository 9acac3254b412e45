"""Whether this run may reboot the host: the loaded module's version and the signs of a pending reboot.

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
    print(json.dumps({"loaded": loaded, "reboot_required": os.path.exists("/var/run/reboot-required"),
                      "nouveau": os.path.exists("/sys/module/nouveau")}))


main()
