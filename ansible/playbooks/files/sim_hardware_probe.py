"""The simulated hardware's files as "path mode owner group" lines (the missing ones left out).

Run by pdfleet_probe (read-only): settings on stdin ({"paths": [...]}), one JSON document on stdout.
"""

import grp
import json
import os
import pwd
import sys


def _line(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"{path} {st.st_mode & 0o7777:o} {owner} {group}"


def main() -> None:
    cfg = json.loads(sys.stdin.readline())
    print(json.dumps({"lines": [line for p in cfg["paths"] if (line := _line(p))]}))


main()
