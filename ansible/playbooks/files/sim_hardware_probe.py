"""The simulated hardware's files as "path mode owner group" lines (the missing ones left out).

Run by pdfleet_probe (read-only): settings on stdin ({"paths": [...]}), one JSON document on stdout.
"""

import json
import sys

from pdfleet_probe_common import stat_of


def _line(path: str) -> str | None:
    state = stat_of(path)
    if state is None:
        return None
    return f"{path} {int(state['mode'], 8):o} {state['owner']} {state['group']}"


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    print(json.dumps({"lines": [line for p in cfg["paths"] if (line := _line(p))]}))


main()
