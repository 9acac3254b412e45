"""The worker journals the verification reads, in one round trip per host (the verify play's collection step).

Two halves, one format:

``read`` (on a worker host, run by the pdfleet_probe action: ``python3 -c <this file's source>`` with the settings
``{"units": [...], "since": EPOCH}`` on standard input, or ``... read SETTINGS_JSON``; standard library only,
so nothing of pdfleet needs to be installed there): for each unit, its journal since the protocol start
(``journalctl -u UNIT --since @EPOCH -o cat``) and, when the unit has an invocation id, its journal from that
last start up to the protocol start (a thread that died before the protocol fails the logs check too). Prints
``{"UNIT": {"since": TEXT, "before": TEXT or null, "error": TEXT}}``.

``write`` (on the control machine: ``python -m pdfleet.verify.journaldump write DIR``, stdin
``{"HOST": <read's output>}``): the layout ``pdfleet verify --resume REPORT --journal-dir DIR`` reads:
``DIR/HOST/UNIT.log`` and ``DIR/HOST/UNIT.before.log``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

BEFORE_SUFFIX = ".before.log"  # pdfleet.verify.logs reads UNIT + this


def _run(argv: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, errors="replace", check=False)
    return proc.returncode, proc.stdout.rstrip("\r\n"), proc.stderr.strip()  # as Ansible's stdout


def read(units: list[str], since_epoch: int) -> dict[str, dict[str, str | None]]:
    out: dict[str, dict[str, str | None]] = {}
    for unit in units:
        rc, since, err = _run(["journalctl", "-u", unit, "--since", f"@{since_epoch}", "-o", "cat", "--no-pager"])
        entry: dict[str, str | None] = {"since": since, "before": None, "error": err if rc else ""}
        rc, invocation, _ = _run(["systemctl", "show", "-p", "InvocationID", "--value", unit])
        if rc == 0 and invocation.strip():
            rc, before, err = _run(["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation.strip()}", "--until",
                                    f"@{since_epoch}", "-o", "short-iso", "--no-pager"])
            entry["before"] = before if rc == 0 else None
            if rc:
                entry["error"] = (str(entry["error"]) + " " + err).strip()
        out[unit] = entry
    return out


def write(directory: str, dumps: dict[str, dict[str, dict[str, str | None]]]) -> list[str]:
    written = []
    os.makedirs(directory, mode=0o750, exist_ok=True)
    for host, units in sorted(dumps.items()):
        host_dir = os.path.join(directory, host)
        os.makedirs(host_dir, mode=0o750, exist_ok=True)
        for unit, entry in sorted(units.items()):
            files = [(unit + ".log", entry.get("since"))]
            if entry.get("before") is not None:
                files.append((unit + BEFORE_SUFFIX, entry["before"]))
            for name, text in files:
                path = os.path.join(host_dir, name)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
                with os.fdopen(fd, "w") as f:
                    f.write((text or "") + "\n")
                written.append(path)
    return written


def main(argv: list[str]) -> int:
    if not argv or (len(argv) == 2 and argv[0] == "read"):
        settings = json.loads(argv[1] if argv else sys.stdin.readline())
        print(json.dumps(read(list(settings["units"]), int(settings["since"]))))
        return 0
    if len(argv) == 2 and argv[0] == "write":
        try:
            dumps = json.load(sys.stdin)
        except ValueError as exc:
            print(f"journaldump write: stdin is not the JSON of the read step: {exc}", file=sys.stderr)
            return 2
        written = write(argv[1], dumps)
        print(json.dumps({"written": len(written), "directory": argv[1]}))
        return 0
    print("usage: journaldump [read SETTINGS_JSON] (no arguments: the settings on stdin) | "
          "journaldump write DIR < DUMPS_JSON", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
